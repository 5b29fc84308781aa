package dev.mobiedit.demo.core;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.File;
import java.io.RandomAccessFile;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Map;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

class ManifestReaderTest {
    private static Map<String, Object> valid() {
        Map<String, Object> m = Fixtures.manifestMap();
        @SuppressWarnings("unchecked")
        Map<String, Object> files = (Map<String, Object>) m.get("files");
        for (String p : new String[] {"model.pte", "tokenizer.json", "keystats.safetensors"}) {
            files.put(p, Fixtures.map("sha256", Sha256Test.ABC, "bytes", 3L));
        }
        return m;
    }

    private static MobiEditError refused(Map<String, Object> m) {
        return assertThrows(MobiEditError.class, () -> ManifestReader.parse(Json.write(m, true)));
    }

    private static void refusedAt(Map<String, Object> m, String field) {
        MobiEditError e = refused(m);
        assertTrue(e.getMessage().contains("field '" + field + "'"), e.getMessage());
    }

    @SuppressWarnings("unchecked")
    private static Map<String, Object> sub(Map<String, Object> m, String... path) {
        Map<String, Object> cur = m;
        for (String k : path) {
            cur = (Map<String, Object>) cur.get(k);
        }
        return cur;
    }

    @Test
    void parsesTheExportersFormat() {
        Manifest m = ManifestReader.parse(Json.write(valid(), false));
        assertEquals(1, m.formatVersion);
        assertEquals("executorch", m.runtime);
        assertEquals("fp32", m.editQuantization);
        assertEquals(Fixtures.D_OUT, m.dOut());
        assertEquals(Fixtures.D_IN, m.dIn());
        assertEquals(17, m.shapes.editK);
        assertEquals(40, m.shapes.editTokens());
        assertEquals(64, m.shapes.editTargets);
        assertEquals(1, m.shapes.editKl);
        assertEquals(2, m.slots);
        assertEquals(1, m.bos);
        assertEquals(0, m.padId());
        for (String role : Manifest.PROGRAMS) {
            Manifest.Program p = m.program(role);
            assertEquals("model.pte", p.file);
            assertEquals(role, p.method);
        }
        assertEquals(Arrays.asList("logits", "new_kv"), m.program("decode").outputs);
        assertEquals("wd_scale", m.program("edit").inputs.get(13));
        assertEquals(Fixtures.TEMPLATES, m.edit.templates);
        assertEquals("{} is a", m.edit.objective.klPrompt);
        assertEquals(0.5, m.edit.objective.weightDecay);
        assertTrue(m.edit.weightOutIn);
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
        refusedAt(m, "runtime");
        m = valid();
        m.put("slots", 0L);
        refusedAt(m, "slots");
        m = valid();
        sub(m, "dims").put("hidden_size", 0L);
        refusedAt(m, "dims.hidden_size");
        m = valid();
        sub(m, "dims").remove("d_out");
        refusedAt(m, "dims.d_out");
        m = valid();
        sub(m, "shapes").remove("edit_K");
        refusedAt(m, "shapes.edit_K");
        m = valid();
        sub(m, "shapes").put("edit_tokens", 41L);
        refusedAt(m, "shapes.edit_tokens");
        m = valid();
        sub(m, "shapes").put("edit_kl", 3L);
        refusedAt(m, "shapes.edit_kl");
        m = valid();
        m.put("edit_layer", 2L);
        refusedAt(m, "edit_layer");
        m = valid();
        sub(m, "special_tokens").put("eos", 400L);
        refusedAt(m, "special_tokens.eos");
        m = valid();
        m.put("quantization", "int3");
        refusedAt(m, "quantization");
        m = valid();
        m.put("edit_quantization", "int3");
        refusedAt(m, "edit_quantization");
    }

    /** ONNX Runtime bundles with block-quantized edit programs (`--edit-quant nbits`) are read. */
    @Test
    void readsTheNbitsEditScheme() {
        Map<String, Object> m = valid();
        m.put("edit_quantization", "nbits");
        assertEquals("nbits", ManifestReader.parse(Json.write(m, false)).editQuantization);
    }

    /** Issue 19 case 7: huge integers, deep nesting and unbounded sizes are named errors. */
    @Test
    void hostileNumbersNestingAndSizesAreNamedErrors() {
        StringBuilder huge = new StringBuilder();
        for (int i = 0; i < 5001; i++) {
            huge.append('9');
        }
        Map<String, Object> m = valid();
        String text = Json.write(m, true).replaceFirst("\"slots\": 2", "\"slots\": " + huge);
        MobiEditError e = assertThrows(MobiEditError.class, () -> ManifestReader.parse(text));
        assertTrue(e.getMessage().contains("field 'slots'"), e.getMessage());
        StringBuilder deep = new StringBuilder("{\"a\": ");
        for (int i = 0; i < 200_000; i++) {
            deep.append('[');
        }
        assertThrows(MobiEditError.class, () -> ManifestReader.parse(deep.toString()));
        m = valid();
        m.put("slots", 1_000_000_000_000L);
        refusedAt(m, "slots");
        m = valid();
        sub(m, "dims").put("d_out", "abc");
        refusedAt(m, "dims.d_out");
        for (String k : new String[] {"hidden_size", "intermediate_size", "d_out", "head_dim",
                "num_layers", "num_kv_heads", "vocab_size"}) {
            m = valid();
            sub(m, "dims").put(k, (long) Integer.MAX_VALUE);
            refusedAt(m, "dims." + k);
        }
        m = valid();
        sub(m, "shapes").put("max_seq_len", 1L << 20);
        refusedAt(m, "shapes.max_seq_len");
        m = valid();  // each size in range, the KV cache they imply is not
        sub(m, "dims").put("num_layers", 1024L);
        sub(m, "dims").put("num_kv_heads", 1024L);
        sub(m, "dims").put("head_dim", 128L);
        sub(m, "shapes").put("max_seq_len", 65536L);
        e = refused(m);
        assertTrue(e.getMessage().contains("field 'shapes.max_seq_len'")
            && e.getMessage().contains("implies a buffer"), e.getMessage());
    }

    @Test
    void nullSpecialTokensFallBackLikeTheBundleTokenizer() {
        Map<String, Object> m = valid();
        sub(m, "special_tokens").put("pad", null);
        Manifest a = ManifestReader.parse(Json.write(m, true));
        assertEquals(-1, a.pad);
        assertEquals(2, a.padId(), "pad falls back to eos");
        sub(m, "special_tokens").put("eos", null);
        sub(m, "special_tokens").remove("bos");
        Manifest b = ManifestReader.parse(Json.write(m, true));
        assertEquals(-1, b.bos);
        assertEquals(0, b.padId());
    }

    @Test
    void everyProgramNeedsAListedFileAMethodAndItsTensorNames() {
        Map<String, Object> m = valid();
        sub(m, "files").remove("model.pte");
        MobiEditError e = refused(m);
        assertTrue(e.getMessage().contains("field 'programs.decode.file'"), e.getMessage());
        assertTrue(e.getMessage().contains("not listed in 'files'"), e.getMessage());
        m = valid();
        sub(m, "programs").remove("prefix");
        refusedAt(m, "programs.prefix");
        m = valid();
        sub(m, "programs").put("prefix", "prefix.pte");
        refusedAt(m, "programs.prefix.file");
        m = valid();
        sub(m, "programs", "edit").put("method", null);
        refusedAt(m, "programs.edit.method");
        m = valid();
        sub(m, "programs", "decode").put("inputs", new ArrayList<Object>());
        refusedAt(m, "programs.decode.inputs");
        m = valid();
        sub(m, "programs", "decode").put("outputs", Arrays.<Object>asList("logits", "logits"));
        refusedAt(m, "programs.decode.outputs");
        // ONNX programs have no method
        m = valid();
        m.put("runtime", "onnxruntime");
        for (String role : Manifest.PROGRAMS) {
            sub(m, "programs", role).put("method", null);
        }
        assertNull(ManifestReader.parse(Json.write(m, true)).program("edit").method);
    }

    @Test
    void readsTheOptionalChatTemplateEntry() {
        Manifest none = ManifestReader.parse(Json.write(valid(), false));
        assertNull(none.chatTemplateFile);
        assertTrue(!none.chatDefault);
        Map<String, Object> m = valid();
        sub(m, "files").put("chat_template.jinja", Fixtures.map("sha256", Sha256Test.ABC, "bytes", 3L));
        m.put("chat", Fixtures.map("template_file", "chat_template.jinja", "default", true));
        Manifest chat = ManifestReader.parse(Json.write(m, false));
        assertEquals("chat_template.jinja", chat.chatTemplateFile);
        assertTrue(chat.chatDefault);
        m.put("chat", Fixtures.map("template_file", "other.jinja", "default", true));
        refusedAt(m, "chat.template_file");
        m.put("chat", Fixtures.map("template_file", "chat_template.jinja", "default", "yes"));
        refusedAt(m, "chat.default");
        m.put("chat", null);
        assertNull(ManifestReader.parse(Json.write(m, false)).chatTemplateFile);
    }

    @Test
    void refusesBadFileEntries() {
        for (String bad : new String[] {"../etc/passwd", "sub/model.pte", ".hidden", "a\\b",
            "manifest.json"}) {
            Map<String, Object> m = valid();
            sub(m, "files").put(bad, Fixtures.map("sha256", Sha256Test.ABC, "bytes", 1L));
            assertTrue(refused(m).getMessage().contains("not a plain file name"), bad);
        }
        Map<String, Object> m = valid();
        sub(m, "files").put("x.bin", Fixtures.map("sha256", "ABC", "bytes", 1L));
        assertTrue(refused(m).getMessage().contains("sha256"));
    }

    @Test
    void refusesAnUnusableEditSetup() {
        Map<String, Object> m = valid();
        sub(m, "edit").put("templates", Arrays.<Object>asList("{}", "no slot"));
        refusedAt(m, "edit.templates");
        m = valid();
        sub(m, "edit").put("templates", Arrays.<Object>asList("{}", "a. {}", "b. {}"));
        MobiEditError e = refused(m);
        assertTrue(e.getMessage().contains("edit_rows is 3"), e.getMessage());
        m = valid();
        sub(m, "edit", "objective").put("kl_prompt", "{} is {}");
        refusedAt(m, "edit.objective.kl_prompt");
        m = valid();
        sub(m, "edit", "objective").put("weight_decay", "0.5");
        refusedAt(m, "edit.objective.weight_decay");
        m = valid();
        m.remove("edit");
        refusedAt(m, "edit");
        // missing objective keys take ROME's defaults, as ObjectiveConfig(**objective) does
        m = valid();
        sub(m, "edit").put("objective", Fixtures.map("weight_decay", 1L));
        Manifest.Objective o = ManifestReader.parse(Json.write(m, true)).edit.objective;
        assertEquals(1.0, o.weightDecay);
        assertEquals(0.0625, o.klFactor);
        assertEquals("{} is a", o.klPrompt);
    }

    @Test
    void readsTheWriteRuleAndRefusesAnUnknownOne() {
        // absent (bundles exported before session 28): ROME's direction
        Manifest.EditSetup e = ManifestReader.parse(Json.write(valid(), true)).edit;
        assertEquals("rome", e.updateRule);
        Map<String, Object> m = valid();
        sub(m, "edit").put("update", Fixtures.map("rule", "rows", "rows_ridge", 0.5));
        e = ManifestReader.parse(Json.write(m, true)).edit;
        assertEquals("rows", e.updateRule);
        assertEquals(0.5, e.rowsRidge);
        m = valid();
        sub(m, "edit").put("update", Fixtures.map("rule", "rows-protect", "edited_weight", 2.5));
        e = ManifestReader.parse(Json.write(m, true)).edit;
        assertEquals("rows-protect", e.updateRule);
        assertEquals(2.5, e.editedWeight);
        assertTrue(e.protects());
        m = valid();
        sub(m, "edit").put("update", Fixtures.map("rule", "protect", "edited_weight", 0L));
        refusedAt(m, "edit.update.edited_weight");
        m = valid();
        sub(m, "edit").put("update", Fixtures.map("rule", "nullspace"));
        refusedAt(m, "edit.update.rule");
        m = valid();
        sub(m, "edit").put("update", Fixtures.map("rule", "rows", "rows_ridge", 0L));
        refusedAt(m, "edit.update.rows_ridge");
        m = valid();
        sub(m, "edit").put("update", Fixtures.map("rule", "rows", "extra", 1L));
        refusedAt(m, "edit.update.extra");
        m = valid();
        sub(m, "edit").put("update", "rows");
        refusedAt(m, "edit.update");
    }

    @Test
    void verifiesEveryChecksumBeforeUse(@TempDir Path tmp) throws Exception {
        File dir = tmp.resolve("bundle").toFile();
        Fixtures.writeBundle(dir, Fixtures.baseWeight());
        List<String> seen = new ArrayList<>();
        Manifest m = ManifestReader.open(dir, (name, i, n) -> seen.add(name));
        assertEquals(3, seen.size());
        assertEquals(m.files.keySet(), new java.util.HashSet<>(seen));

        try (RandomAccessFile f = new RandomAccessFile(new File(dir, "model.pte"), "rw")) {
            f.seek(0);
            f.write('F');
        }
        MobiEditError e = assertThrows(MobiEditError.class, () -> ManifestReader.open(dir, null));
        assertTrue(e.getMessage().contains("files['model.pte'], field 'sha256'"), e.getMessage());
        assertTrue(e.getMessage().contains("sha256 mismatch"), e.getMessage());

        Files.write(new File(dir, "model.pte").toPath(), "short".getBytes("UTF-8"));
        assertTrue(assertThrows(MobiEditError.class, () -> ManifestReader.open(dir, null))
            .getMessage().contains("size is 5 bytes"));
        new File(dir, "model.pte").delete();
        assertTrue(assertThrows(MobiEditError.class, () -> ManifestReader.open(dir, null))
            .getMessage().contains("missing"));
        assertTrue(assertThrows(MobiEditError.class,
            () -> ManifestReader.open(tmp.resolve("nothing").toFile(), null)).getMessage()
            .contains("no manifest.json"));
    }
}
