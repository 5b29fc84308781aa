package dev.mobiedit.demo.core;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.File;
import java.io.RandomAccessFile;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

class ManifestReaderTest {
    private static Map<String, Object> valid() {
        Map<String, Object> m = Fixtures.manifestMap();
        @SuppressWarnings("unchecked")
        Map<String, Object> files = (Map<String, Object>) m.get("files");
        String sha = Sha256Test.ABC;
        for (String p : new String[] {"prefill.pte", "decode.pte", "edit.pte", "prefix.pte", "tokenizer.json"}) {
            files.put(p, Fixtures.map("sha256", sha, "bytes", 3L));
        }
        return m;
    }

    private static MobiEditError refused(Map<String, Object> m) {
        return assertThrows(MobiEditError.class, () -> ManifestReader.parse(Json.write(m, true)));
    }

    @SuppressWarnings("unchecked")
    private static Map<String, Object> sub(Map<String, Object> m, String k) {
        return (Map<String, Object>) m.get(k);
    }

    @Test
    void parsesTheDocumentedExample() {
        Manifest m = ManifestReader.parse(Json.write(valid(), false));
        assertEquals(1, m.formatVersion);
        assertEquals("executorch", m.runtime);
        assertEquals(Fixtures.D_OUT, m.dOut());
        assertEquals(Fixtures.D_IN, m.dIn());
        assertEquals(17, m.shapes.editK);
        assertEquals(40, m.shapes.editTokens());
        assertEquals(2, m.slots);
        assertEquals("edit.pte", m.program("edit"));
        assertEquals(1, m.bos);
    }

    @Test
    void refusesANewerFormatAndSaysUpgrade() {
        Map<String, Object> m = valid();
        m.put("format_version", 2L);
        MobiEditError e = refused(m);
        assertTrue(e.getMessage().contains("field 'format_version'"), e.getMessage());
        assertTrue(e.fix().contains("upgrade"), e.getMessage());
    }

    @Test
    void refusesUnknownRuntimeZeroSlotsAndBadDims() {
        Map<String, Object> m = valid();
        m.put("runtime", "tflite");
        assertTrue(refused(m).getMessage().contains("field 'runtime'"));
        m = valid();
        m.put("slots", 0L);
        assertTrue(refused(m).getMessage().contains("field 'slots'"));
        m = valid();
        sub(m, "dims").put("hidden_size", 0L);
        assertTrue(refused(m).getMessage().contains("field 'dims.hidden_size'"));
        m = valid();
        sub(m, "shapes").remove("edit_K");
        assertTrue(refused(m).getMessage().contains("field 'shapes.edit_K'"));
        m = valid();
        m.put("edit_layer", 2L);
        assertTrue(refused(m).getMessage().contains("field 'edit_layer'"));
        m = valid();
        sub(m, "special_tokens").put("eos", 400L);
        assertTrue(refused(m).getMessage().contains("field 'special_tokens.eos'"));
        m = valid();
        m.put("quantization", "int3");
        assertTrue(refused(m).getMessage().contains("field 'quantization'"));
    }

    @Test
    void everyProgramMustBeListedInFiles() {
        Map<String, Object> m = valid();
        sub(m, "files").remove("edit.pte");
        MobiEditError e = refused(m);
        assertTrue(e.getMessage().contains("field 'programs.edit'"), e.getMessage());
        assertTrue(e.getMessage().contains("not listed in 'files'"), e.getMessage());
        m = valid();
        sub(m, "programs").remove("prefix");
        assertTrue(refused(m).getMessage().contains("programs.prefix"));
    }

    @Test
    void refusesBadFileEntries() {
        Map<String, Object> m = valid();
        sub(m, "files").put("../etc/passwd", Fixtures.map("sha256", Sha256Test.ABC, "bytes", 1L));
        assertTrue(refused(m).getMessage().contains("not a plain file name"));
        m = valid();
        sub(m, "files").put("x.bin", Fixtures.map("sha256", "ABC", "bytes", 1L));
        assertTrue(refused(m).getMessage().contains("sha256"));
    }

    @Test
    void verifiesEveryChecksumBeforeUse(@TempDir Path tmp) throws Exception {
        File dir = tmp.resolve("bundle").toFile();
        Fixtures.writeBundle(dir, Fixtures.baseWeight());
        List<String> seen = new ArrayList<>();
        Manifest m = ManifestReader.open(dir, (name, i, n) -> seen.add(name));
        assertEquals(6, seen.size());
        assertEquals(m.files.keySet(), new java.util.HashSet<>(seen));

        try (RandomAccessFile f = new RandomAccessFile(new File(dir, "edit.pte"), "rw")) {
            f.seek(0);
            f.write('F');
        }
        MobiEditError e = assertThrows(MobiEditError.class, () -> ManifestReader.open(dir, null));
        assertTrue(e.getMessage().contains("files['edit.pte'], field 'sha256'"), e.getMessage());
        assertTrue(e.getMessage().contains("sha256 mismatch"), e.getMessage());

        Files.write(new File(dir, "edit.pte").toPath(), "short".getBytes("UTF-8"));
        assertTrue(assertThrows(MobiEditError.class, () -> ManifestReader.open(dir, null))
            .getMessage().contains("size is 5 bytes"));
        new File(dir, "edit.pte").delete();
        assertTrue(assertThrows(MobiEditError.class, () -> ManifestReader.open(dir, null))
            .getMessage().contains("missing"));
        assertTrue(assertThrows(MobiEditError.class,
            () -> ManifestReader.open(tmp.resolve("nothing").toFile(), null)).getMessage()
            .contains("no manifest.json"));
    }
}
