package dev.mobiedit.demo.app;

import static dev.mobiedit.demo.app.ExportedBundle.assertCallMatchesThePte;
import static dev.mobiedit.demo.app.ExportedBundle.assertMatches;
import static dev.mobiedit.demo.app.ExportedBundle.dir;
import static dev.mobiedit.demo.app.ExportedBundle.edit;
import static dev.mobiedit.demo.app.ExportedBundle.f32;
import static dev.mobiedit.demo.app.ExportedBundle.input;
import static dev.mobiedit.demo.app.ExportedBundle.io;
import static dev.mobiedit.demo.app.ExportedBundle.m;
import static dev.mobiedit.demo.app.ExportedBundle.metas;
import static dev.mobiedit.demo.app.ExportedBundle.obj;
import static dev.mobiedit.demo.app.ExportedBundle.raw;
import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.mobiedit.demo.app.ExportedBundle.Call;
import dev.mobiedit.demo.app.ExportedBundle.Recording;
import dev.mobiedit.demo.core.ByteLevelBpe;
import dev.mobiedit.demo.core.EditBatch;
import dev.mobiedit.demo.core.EditBatchBuilder;
import dev.mobiedit.demo.core.EditPack;
import dev.mobiedit.demo.core.EditRequest;
import dev.mobiedit.demo.core.Files2;
import dev.mobiedit.demo.core.HostTensor;
import dev.mobiedit.demo.core.Journal;
import dev.mobiedit.demo.core.LanguageModel;
import dev.mobiedit.demo.core.Manifest;
import dev.mobiedit.demo.core.Recipe;
import java.io.File;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Map;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;

/**
 * Against a bundle written by the real exporter (fixtures/exported_bundle, made by
 * tools/make_bundle_fixture.py with `mobiedit export`): the app parses its manifest.json and
 * verifies its checksums, and every program call the app makes — method name, number, order,
 * dtype and shape of the inputs — is what the exported model.pte declares (its ExecuTorch
 * MethodMeta, program_io.json). The edit's host side (packing, keys → k̄, wd_scale, C⁻¹k̄, the
 * rank-one factors) equals mobiedit.export's on the same request. The fixture and the recording
 * executor are {@link ExportedBundle}'s.
 */
class ExportedBundleTest {
    @BeforeAll
    static void load() throws Exception {
        ExportedBundle.load();
    }

    @Test
    void parsesTheExportersManifestAndVerifiesItsFiles() {
        assertEquals(1, m.formatVersion);
        assertEquals("executorch", m.runtime);
        assertEquals("8da8w", m.quantization);
        assertEquals("delta", m.editQuantization);
        assertEquals("model.layers.1.mlp.down_proj", m.editModule);
        assertEquals(64, m.dOut());
        assertEquals(128, m.dIn());
        assertEquals(22, m.shapes.editRows);
        assertEquals(21, m.edit.templates.size());
        assertEquals("{}", m.edit.templates.get(0));
        assertEquals(Arrays.asList("keystats.safetensors", "model.pte", "tokenizer.json"),
            new ArrayList<>(m.files.keySet()));
        assertTrue(Journal.open(new File(dir, "journal")).entries().isEmpty());
        KeyStats.open(dir, m.dIn(), m.dOut());
        // the exporter writes the shipped recipe, n_dirs fitted to edit_K (5 - 1): the same
        // values the app falls back to for manifests without a recipe
        assertTrue(m.recipe.fromManifest);
        assertEquals(4, m.recipe.nDirs);
        RecipeTest.assertSameRecipe(Recipe.shippedFallback(m.shapes.editK), m.recipe);
    }

    @Test
    void oneModelPteWithAMethodPerProgramInTheExportersOrder() {
        BundlePrograms.checkContract(m);
        @SuppressWarnings("unchecked")
        Map<String, Object> methods = (Map<String, Object>) io.get("methods");
        assertEquals(new java.util.TreeSet<>(Arrays.asList(Manifest.PROGRAMS)), new java.util.TreeSet<>(methods.keySet()));
        for (String role : Manifest.PROGRAMS) {
            Manifest.Program p = m.program(role);
            assertEquals("model.pte", p.file);
            assertEquals(role, p.method);
            assertEquals(metas(role, "inputs").size(), p.inputs.size(), role);
            assertEquals(metas(role, "outputs").size(), p.outputs.size(), role);
            assertTrue(BundlePrograms.knownInputs(role).containsAll(p.inputs), role);
        }
        assertEquals(Arrays.asList("tokens", "start", "logit_index", "kv_cache", "slot_u", "slot_w"),
            m.program("prefill").inputs);
        assertEquals(Arrays.asList("input_ids", "suffix_pos", "subject_pos", "kl_index", "slot_u", "slot_w"),
            m.program("prefix").inputs);
        assertEquals(Arrays.asList("h_suffix", "prefix_kv", "cos", "sin", "kl_ref", "keys", "values"),
            m.program("prefix").outputs);
        assertEquals(Arrays.asList("deltas", "h_suffix", "prefix_kv", "mask", "cos", "sin", "target_index",
            "target_label", "target_weight", "target_rows", "kl_suffix_index", "kl_ref", "kl_weight", "wd_scale"),
            m.program("edit").inputs);
        assertEquals(Arrays.asList("losses", "correct"), m.program("edit").outputs);
    }

    @Test
    void chatCallsPrefillAndDecodeAsThePteDeclaresThem() throws Exception {
        Recording rec = new Recording();
        BundlePrograms rt = new BundlePrograms(m, rec);
        float[] u = new float[m.slots * m.dOut()];
        u[3] = 0.5f;
        rt.setSlots(u, new float[m.slots * m.dIn()]);
        int[] ids = new int[11];
        for (int i = 0; i < ids.length; i++) {
            ids[i] = 20 + i;
        }
        LanguageModel lm = rt.chat();
        float[] logits = lm.start(ids);
        assertEquals(m.dims.vocabSize, logits.length);
        assertEquals(1f, logits[7]);
        lm.next(7);
        assertEquals(3, rec.calls.size(), "two prefill chunks of 8, one decode");
        int c = m.shapes.prefillChunk;
        String[] methods = {"prefill", "prefill", "decode"};
        for (int i = 0; i < 3; i++) {
            Call call = rec.calls.get(i);
            assertEquals(methods[i], call.program.method);
            assertCallMatchesThePte(call);
            assertEquals(0.5f, input(call, "slot_u").floats()[3]);
        }
        Call second = rec.calls.get(1);
        assertArrayEquals(new long[] {28, 29, 30, 0, 0, 0, 0, 0}, input(second, "tokens").longs());
        assertArrayEquals(new long[] {c}, input(second, "start").longs());
        assertArrayEquals(new long[] {2}, input(second, "logit_index").longs(), "last real token of the chunk");
        Call dec = rec.calls.get(2);
        assertArrayEquals(new long[] {7}, input(dec, "tokens").longs());
        assertArrayEquals(new long[] {11}, input(dec, "start").longs());
        assertArrayEquals(new long[] {0}, input(dec, "logit_index").longs());
        // the host cache [2L, Hkv, T, hd] holds each call's new_kv at its positions (real ones only)
        float[] cache = input(dec, "kv_cache").floats();
        int t = m.shapes.maxSeqLen;
        int hd = m.dims.headDim;
        int lastRow = 2 * m.dims.numLayers * m.dims.numKvHeads - 1;
        for (int pos = 0; pos < t; pos++) {
            float want = pos < c ? 1000 + pos : pos < 11 ? 2000 + pos - c : 0;
            assertEquals(want, cache[(lastRow * t + pos) * hd + hd - 1], "cache position " + pos);
        }
    }

    @Test
    @SuppressWarnings("unchecked")
    void editPacksLikeTheExporterAndCallsPrefixAndEditAsThePteDeclaresThem() throws Exception {
        Map<String, Object> r = obj(edit, "request");
        EditRequest req = EditRequest.fromForm((String) r.get("subject"), (String) r.get("prompt"),
            (String) r.get("target_new"));
        ByteLevelBpe tok = ByteLevelBpe.fromJson(Files2.readText(new File(dir, "tokenizer.json")), "tokenizer.json");
        EditBatch batch = EditBatchBuilder.build(tok, req, m.edit.templates, m.edit.objective.klPrompt, m.padId());
        EditPack pack = EditPack.pack(batch, m.shapes, m.edit.objective);
        assertEquals(((Long) edit.get("n_rows")).intValue(), pack.nRows);
        assertEquals(((Long) edit.get("n_rewrite")).intValue(), pack.nRewrite);
        assertEquals(((Long) edit.get("target_len")).intValue(), pack.targetLen);
        for (String feed : new String[] {"prefix_feed", "static_feed"}) {
            Map<String, HostTensor> mine = feed.equals("prefix_feed") ? pack.prefixFeed() : pack.staticFeed();
            Map<String, Object> py = obj(edit, feed);
            assertEquals(py.keySet(), mine.keySet(), feed);
            for (String name : py.keySet()) {
                assertMatches(feed + "." + name, (Map<String, Object>) py.get(name), mine.get(name));
            }
        }

        Recording rec = new Recording();
        BundlePrograms rt = new BundlePrograms(m, rec);
        EditPrograms programs = rt.edit();
        float[] su = new float[m.slots * m.dOut()];
        float[] sw = new float[m.slots * m.dIn()];
        PrefixState st = programs.prefix(pack, su, sw);
        Call prefix = rec.calls.get(0);
        assertEquals("prefix", prefix.program.method);
        assertCallMatchesThePte(prefix);
        for (String name : pack.prefixFeed().keySet()) {
            assertArrayEquals(raw(pack.prefixFeed().get(name)), raw(input(prefix, name)), name);
        }
        // host side of mobiedit.export.ops: k_cur = keys[0], v_init = out_cur = values[0], k̄, wd_scale
        float[] keys = f32(obj(edit, "prefix_outputs", "keys"));
        float[] values = f32(obj(edit, "prefix_outputs", "values"));
        assertArrayEquals(Arrays.copyOf(keys, m.dIn()), st.kCur);
        assertArrayEquals(Arrays.copyOf(values, m.dOut()), st.vInit);
        assertArrayEquals(st.vInit, st.outCur);
        KeyStats ks = KeyStats.open(dir, m.dIn(), m.dOut());
        float[] c = ks.solve(st.kBar);
        float[] pyC = f32(obj(edit, "c"));
        for (int i = 0; i < c.length; i++) {
            assertEquals(pyC[i], c[i], 1e-4 * (1 + Math.abs(pyC[i])), "C^-1 k̄ [" + i + "]");
        }
        // the rows write rule on the same keys (mobiedit.editing.update.bundle_direction "rows")
        assertEquals(pack.nRewrite, st.nRewrite);
        assertArrayEquals(Arrays.copyOf(keys, pack.nRewrite * m.dIn()), st.rewriteKeys);
        double ridge = ((Number) edit.get("rows_ridge")).doubleValue();
        float[] cRows = ks.rowsDirection(st.rewriteKeys, st.nRewrite, ridge);
        float[] pyRows = f32(obj(edit, "c_rows"));
        for (int i = 0; i < cRows.length; i++) {
            assertEquals(pyRows[i], cRows[i], 1e-4 * (1 + Math.abs(pyRows[i])), "rows direction [" + i + "]");
        }

        int k = m.shapes.editK;
        float[] deltas = new float[k * m.dOut()];
        float[] losses = new float[k];
        float[] correct = new float[k * pack.nRewrite];
        programs.edit(st, deltas, losses, correct);
        Call call = rec.calls.get(1);
        assertEquals("edit", call.program.method);
        assertCallMatchesThePte(call);
        assertMatches("wd_scale", obj(edit, "wd_scale"), input(call, "wd_scale"));
        for (String name : pack.staticFeed().keySet()) {
            assertArrayEquals(raw(pack.staticFeed().get(name)), raw(input(call, name)), name);
        }
        assertEquals(HostTensor.DType.I64, input(call, "mask").dtype);
        assertArrayEquals(new float[] {0, 1, 2, 3, 4}, losses);
        // correct [K, B] -> the rewrite rows of each delta
        assertEquals(100f, correct[pack.nRewrite]);
        assertEquals(120f, correct[pack.nRewrite + 20]);

        // the rank-one factors of mobiedit.export.ops for the fixture's delta
        float[] delta = f32(obj(edit, "delta"));
        EditRunner runner = new EditRunner(tok, m, programs, ks);
        float[][] f = runner.factors(st, delta);
        float[] pyU = f32(obj(edit, "u"));
        float[] pyW = f32(obj(edit, "w"));
        for (int i = 0; i < pyU.length; i++) {
            assertEquals(pyU[i], f[0][i], 1e-5 * (1 + Math.abs(pyU[i])), "u[" + i + "]");
        }
        for (int i = 0; i < pyW.length; i++) {
            assertEquals(pyW[i], f[1][i], 1e-3 * Math.abs(pyW[i]) + 1e-6, "w[" + i + "]");
        }
    }

    @Test
    void everyInputIsATensorTheExecuTorchJavaApiCanBuild() {
        // Tensor.fromBlob(float[] / long[]) only: model.pte's methods take float32 and int64
        // (the edit mask too: the Java API has no bool tensors, and ExecuTorch refuses uint8 for bool)
        for (String role : Manifest.PROGRAMS) {
            for (Map<String, Object> in : metas(role, "inputs")) {
                assertTrue(Arrays.asList("float32", "int64").contains(in.get("dtype")), role + ": " + in);
            }
        }
        assertEquals("int64", metas("edit", "inputs").get(m.program("edit").inputs.indexOf("mask")).get("dtype"));
    }

    @Test
    @SuppressWarnings("unchecked")
    void theRealEditProgramCountsArgmaxTargetsExactly() {
        // tools/make_bundle_fixture.py ran the exported edit method (ExecuTorch, 8da8w / delta):
        // correct [K, B] holds integers in [0, target_len] on the rewrite rows and 0 elsewhere
        int targetLen = ((Long) edit.get("target_len")).intValue();
        int nRewrite = ((Long) edit.get("n_rewrite")).intValue();
        List<List<Object>> correct = (List<List<Object>>) edit.get("edit_correct");
        assertEquals(m.shapes.editK, correct.size());
        for (List<Object> row : correct) {
            assertEquals(m.shapes.editRows, row.size());
            for (int b = 0; b < row.size(); b++) {
                double v = ((Number) row.get(b)).doubleValue();
                assertEquals(Math.rint(v), v, "an integer count: " + row);
                assertTrue(v >= 0 && v <= (b < nRewrite ? targetLen : 0), "row " + b + ": " + row);
            }
        }
    }
}
