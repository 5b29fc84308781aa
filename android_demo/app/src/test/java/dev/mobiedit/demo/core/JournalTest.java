package dev.mobiedit.demo.core;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.File;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardCopyOption;
import java.util.Arrays;
import java.util.List;
import java.util.Map;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

class JournalTest {
    static final EditTarget TARGET = new EditTarget(Fixtures.MODULE, 1, "llama", true, 4, 6, "mobiedit");

    static File pyJournalCopy(Path tmp) throws Exception {
        File src = Fixtures.resource("py_journal");
        File dst = tmp.resolve("journal").toFile();
        dst.mkdirs();
        for (File f : src.listFiles()) {
            Files.copy(f.toPath(), new File(dst, f.getName()).toPath(), StandardCopyOption.REPLACE_EXISTING);
        }
        new File(dst, "expected.json").delete();
        return dst;
    }

    @SuppressWarnings("unchecked")
    static Map<String, Object> expected() throws Exception {
        return Json.parseObject(Files2.readText(Fixtures.resource("py_journal/expected.json")), "expected");
    }

    static float[] floats(Object list) {
        List<?> l = (List<?>) list;
        float[] out = new float[l.size()];
        for (int i = 0; i < out.length; i++) {
            out[i] = ((Number) l.get(i)).floatValue();
        }
        return out;
    }

    @Test
    @SuppressWarnings("unchecked")
    void readsAJournalWrittenByPython(@TempDir Path tmp) throws Exception {
        Journal j = Journal.open(pyJournalCopy(tmp));
        assertEquals(2, j.entries().size());
        assertEquals(1, j.active().size());
        JournalEntry e1 = j.entry(1);
        assertEquals("applied", e1.status);
        assertEquals("undone", j.entry(2).status);
        assertEquals("The mother tongue of {} is", e1.request.get("prompt"));
        assertEquals("#1  The mother tongue of Danielle Darrieux is → English", e1.label());
        List<Object> edits = (List<Object>) expected().get("edits");
        for (int i = 0; i < 2; i++) {
            Map<String, Object> ex = (Map<String, Object>) edits.get(i);
            float[][] f = j.loadFactors(j.entry(i + 1));
            assertArrayEquals(floats(ex.get("u")), f[0]);
            assertArrayEquals(floats(ex.get("w")), f[1]);
        }
        // tensor_sha256 of base.safetensors computed in Java equals the one Python stored
        File base = new File(j.folder(), Journal.BASE_FILE);
        Tensor t = Safetensors.parse(Files2.read(base), "base").get(Fixtures.MODULE, "base");
        assertEquals(expected().get("base_sha256"), TensorHash.of(t));
        assertEquals(e1.baseSha256, TensorHash.of(t));
    }

    @Test
    void rewritesPythonLinesByteForByte(@TempDir Path tmp) throws Exception {
        File dir = pyJournalCopy(tmp);
        String before = Files2.readText(new File(dir, Journal.JOURNAL_FILE));
        Journal j = Journal.open(dir);
        j.undo(1);
        String after = Files2.readText(new File(dir, Journal.JOURNAL_FILE));
        // only the status of edit 1 changed; every other byte is as Python wrote it
        assertEquals(before.replaceFirst("\"status\": \"applied\"", "\"status\": \"undone\""), after);
    }

    @Test
    void recordUndoAndSlots(@TempDir Path tmp) throws Exception {
        File dir = pyJournalCopy(tmp);
        Journal j = Journal.open(dir);
        EditRequest req = EditRequest.fromForm("Lionel Messi", "{} plays", "cricket");
        float[] u = {1, 2, 3, 4};
        float[] w = {0.5f, 0, 0, 0, 0, -0.5f};
        Map<String, Object> metrics = Fixtures.map("succeeded", true, "steps", 12L, "wall_time", 0.25);
        JournalEntry e = j.record(req, TARGET, u, w, metrics, null, "2025-01-01T00:00:00.000000+00:00");
        assertEquals(3, e.id);
        assertEquals(j.entry(1).baseSha256, e.baseSha256);
        assertEquals("edit-000003.safetensors", e.factors);
        assertTrue(new File(dir, e.factors).isFile());

        Journal again = Journal.open(dir);
        assertEquals(3, again.entries().size());
        assertArrayEquals(u, again.loadFactors(again.entry(3))[0]);
        String line = Files2.readText(new File(dir, Journal.JOURNAL_FILE)).split("\n")[2];
        assertTrue(line.startsWith("{\"base_sha256\": "), line);
        assertTrue(line.contains("\"metrics\": {\"steps\": 12, \"succeeded\": true, \"wall_time\": 0.25}"), line);

        float[][] slots = again.slotFactors(Fixtures.MODULE, 2, 4, 6);
        float[][] f1 = again.loadFactors(again.entry(1));
        assertArrayEquals(f1[0], Arrays.copyOfRange(slots[0], 0, 4));
        assertArrayEquals(u, Arrays.copyOfRange(slots[0], 4, 8));
        assertArrayEquals(w, Arrays.copyOfRange(slots[1], 6, 12));

        again.undo(1);
        slots = again.slotFactors(Fixtures.MODULE, 2, 4, 6);
        assertArrayEquals(u, Arrays.copyOfRange(slots[0], 0, 4));
        assertArrayEquals(new float[4], Arrays.copyOfRange(slots[0], 4, 8));
        MobiEditError twice = assertThrows(MobiEditError.class, () -> again.undo(1));
        assertTrue(twice.getMessage().contains("already undone"));
        assertTrue(assertThrows(MobiEditError.class, () -> again.undo(9)).getMessage().contains("use one of the ids [1, 2, 3]"));
    }

    @Test
    void slotOverflowAndForeignModulesAreRefused(@TempDir Path tmp) throws Exception {
        Journal j = Journal.open(pyJournalCopy(tmp));
        EditRequest req = EditRequest.fromForm("A", "{} is", "b");
        j.record(req, TARGET, new float[4], new float[6], null, null, "t");
        MobiEditError e = assertThrows(MobiEditError.class, () -> j.slotFactors(Fixtures.MODULE, 1, 4, 6));
        assertTrue(e.getMessage().contains("more active edits than the bundle's 1 slots"), e.getMessage());
        e = assertThrows(MobiEditError.class, () -> j.slotFactors("model.layers.2.mlp.down_proj", 4, 4, 6));
        assertTrue(e.fix().contains("undo edit 1"), e.getMessage());
    }

    @Test
    void refusesNonFiniteOrMisshapenFactors(@TempDir Path tmp) throws Exception {
        Journal j = Journal.open(pyJournalCopy(tmp));
        EditRequest req = EditRequest.fromForm("A", "{} is", "b");
        float[] nan = {Float.NaN, 0, 0, 0};
        assertTrue(assertThrows(MobiEditError.class, () -> j.record(req, TARGET, nan, new float[6], null, null, "t"))
            .getMessage().contains("argument 'u'"));
        assertThrows(MobiEditError.class, () -> j.record(req, TARGET, new float[3], new float[6], null, null, "t"));
        assertEquals(2, j.entries().size());
    }

    @Test
    void detectsTamperingAndDamage(@TempDir Path tmp) throws Exception {
        File dir = pyJournalCopy(tmp);
        File f1 = new File(dir, "edit-000001.safetensors");
        byte[] b = Files2.read(f1);
        b[b.length - 1] ^= 1;
        Files.write(f1.toPath(), b);
        MobiEditError e = assertThrows(MobiEditError.class, () -> Journal.open(dir));
        assertTrue(e.getMessage().contains("edit 1, field 'sha256'"), e.getMessage());

        File dir2 = pyJournalCopy(tmp.resolve("b"));
        File jl = new File(dir2, Journal.JOURNAL_FILE);
        String text = Files2.readText(jl);
        Files.write(jl.toPath(), text.substring(0, text.length() - 1).getBytes("UTF-8"));
        assertTrue(assertThrows(MobiEditError.class, () -> Journal.open(dir2)).getMessage().contains("no newline"));
        Files.write(jl.toPath(), text.replace("\"version\": 1", "\"version\": 1, \"zzz\": 0").getBytes("UTF-8"));
        assertTrue(assertThrows(MobiEditError.class, () -> Journal.open(dir2)).getMessage().contains("field 'zzz'"));
        Files.write(jl.toPath(), text.replace("\"id\": 2", "\"id\": 1").getBytes("UTF-8"));
        assertThrows(MobiEditError.class, () -> Journal.open(dir2));
        Files.write(jl.toPath(), text.replace("\"status\": \"undone\"", "\"status\": \"maybe\"").getBytes("UTF-8"));
        assertTrue(assertThrows(MobiEditError.class, () -> Journal.open(dir2)).getMessage().contains("field 'status'"));
        Files.write(jl.toPath(), text.replace("\"layer\": 1,", "\"layer\": \"1\",").getBytes("UTF-8"));
        assertTrue(assertThrows(MobiEditError.class, () -> Journal.open(dir2)).getMessage().contains("must be int"));
        Files.write(jl.toPath(), text.replaceFirst("\"d_out\": 4", "\"d_out\": 5").getBytes("UTF-8"));
        assertTrue(assertThrows(MobiEditError.class, () -> Journal.open(dir2)).getMessage().contains("field 'd_out'"));
    }

    @Test
    void startsEmptyJournalsButRefusesForeignFolders(@TempDir Path tmp) throws Exception {
        File fresh = tmp.resolve("new").toFile();
        Journal j = Journal.open(fresh);
        assertTrue(j.entries().isEmpty());
        assertTrue(new File(fresh, Journal.JOURNAL_FILE).isFile());
        File onlyBase = tmp.resolve("b").toFile();
        onlyBase.mkdirs();
        Files.write(new File(onlyBase, "base.safetensors").toPath(), new byte[0]);
        assertTrue(Journal.open(onlyBase).entries().isEmpty());
        File other = tmp.resolve("o").toFile();
        other.mkdirs();
        Files.write(new File(other, "notes.txt").toPath(), new byte[0]);
        assertFalse(assertThrows(MobiEditError.class, () -> Journal.open(other)).getMessage().isEmpty());
    }

    @Test
    void baseShaComesFromBaseSafetensorsForTheFirstEdit(@TempDir Path tmp) throws Exception {
        File dir = tmp.resolve("journal").toFile();
        dir.mkdirs();
        Files.copy(Fixtures.resource("py_journal/base.safetensors").toPath(), new File(dir, Journal.BASE_FILE).toPath());
        Journal j = Journal.open(dir);
        assertEquals(expected().get("base_sha256"), j.baseSha256(Fixtures.MODULE));
        MobiEditError e = assertThrows(MobiEditError.class, () -> j.baseSha256("model.layers.0.mlp.down_proj"));
        assertTrue(e.fix().contains("re-export"), e.getMessage());
    }

    @Test
    void theFirstEditStoresTheBaseWeightAsPythonDoes(@TempDir Path tmp) throws Exception {
        // an exported bundle's journal starts empty; its base weight is keystats' base_weight
        File dir = tmp.resolve("journal").toFile();
        Journal j = Journal.open(dir);
        File py = Fixtures.resource("py_journal/base.safetensors");
        Tensor base = Safetensors.parse(Files2.read(py), "py").get(Fixtures.MODULE, "py");
        Tensor exported = new Tensor("base_weight", base.dtype, base.shape(), base.raw());
        EditRequest req = EditRequest.fromForm("Lionel Messi", "{} plays", "cricket");
        JournalEntry e = j.record(req, TARGET, new float[] {1, 2, 3, 4}, new float[6], exported, null, null, "t");
        assertEquals(expected().get("base_sha256"), e.baseSha256);
        // byte for byte what mobiedit/journal.py writes (Journal._store_base)
        assertArrayEquals(Files2.read(py), Files2.read(new File(dir, Journal.BASE_FILE)));
        // later edits keep the first one's base
        JournalEntry e2 = j.record(req, TARGET, new float[] {1, 0, 0, 0}, new float[6],
            Tensor.f32("other", new long[] {4, 6}, new float[24]), null, null, "t");
        assertEquals(e.baseSha256, e2.baseSha256);
        assertArrayEquals(Files2.read(py), Files2.read(new File(dir, Journal.BASE_FILE)));
        assertThrows(MobiEditError.class, () -> Journal.open(tmp.resolve("x").toFile()).record(req, TARGET,
            new float[4], new float[6], Tensor.f32("bad", new long[] {3, 6}, new float[18]), null, null, "t"));
    }
}
