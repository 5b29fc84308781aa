package dev.mobiedit.demo.core;

import java.io.File;
import java.io.IOException;
import java.net.URISyntaxException;
import java.net.URL;
import java.nio.file.Files;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.LinkedHashMap;
import java.util.Map;

/** Test data: classpath fixtures and small synthetic bundles with a valid manifest. */
public final class Fixtures {
    public static final String MODULE = "model.layers.1.mlp.down_proj";
    public static final int D_OUT = 8;
    public static final int D_IN = 12;

    private Fixtures() {
    }

    /** A file under src/test/resources/fixtures. */
    public static File resource(String name) {
        URL u = Fixtures.class.getClassLoader().getResource("fixtures/" + name);
        if (u == null) {
            throw new IllegalStateException("test resource fixtures/" + name
                + " is not on the classpath (add app/src/test/resources)");
        }
        try {
            return new File(u.toURI());
        } catch (URISyntaxException e) {
            throw new IllegalStateException(e);
        }
    }

    /** The tokenizer trained by tools/make_tokenizer_fixture.py. */
    public static ByteLevelBpe tokenizer() throws IOException {
        File f = resource("tokenizer.json");
        return ByteLevelBpe.fromJson(Files2.readText(f), f.getPath());
    }

    /** The two context templates of {@link #manifestMap} (edit_rows 3 = 2 templates + KL). */
    public static final List<String> TEMPLATES = Arrays.asList("{}", "The quick brown fox. {}");

    /** Program input / output names as export/graphs.py writes them (rotary family). */
    public static Map<String, Object> programs(String file) {
        List<Object> step = Arrays.<Object>asList("tokens", "start", "logit_index", "kv_cache", "slot_u",
            "slot_w");
        List<Object> stepOut = Arrays.<Object>asList("logits", "new_kv");
        return map(
            "prefill", map("file", file, "method", "prefill", "inputs", step, "outputs", stepOut),
            "decode", map("file", file, "method", "decode", "inputs", step, "outputs", stepOut),
            "prefix", map("file", file, "method", "prefix", "inputs", Arrays.<Object>asList("input_ids",
                "suffix_pos", "subject_pos", "kl_index", "slot_u", "slot_w"), "outputs",
                Arrays.<Object>asList("h_suffix", "prefix_kv", "cos", "sin", "kl_ref", "keys", "values")),
            "edit", map("file", file, "method", "edit", "inputs", Arrays.<Object>asList("deltas", "h_suffix",
                "prefix_kv", "mask", "cos", "sin", "target_index", "target_label", "target_weight",
                "target_rows", "kl_suffix_index", "kl_ref", "kl_weight", "wd_scale"), "outputs",
                Arrays.<Object>asList("losses", "correct")));
    }

    /**
     * A valid manifest map in export/bundle.py's format (files filled by {@link #writeBundle});
     * edit_rows = 3 (two templates + the KL prompt).
     */
    public static Map<String, Object> manifestMap() {
        Map<String, Object> m = new LinkedHashMap<>();
        m.put("format_version", 1L);
        m.put("created_by", "mobiedit 0.1.0");
        m.put("runtime", "executorch");
        m.put("model_family", "llama");
        m.put("quantization", "fp32");
        m.put("edit_quantization", "fp32");
        m.put("edit_layer", 1L);
        m.put("edit_module", MODULE);
        m.put("dims", map("vocab_size", 400L, "hidden_size", (long) D_OUT, "intermediate_size",
            (long) D_IN, "num_layers", 2L, "num_heads", 2L, "num_kv_heads", 2L, "head_dim", 4L,
            "d_out", (long) D_OUT));
        m.put("shapes", map("max_seq_len", 64L, "prefill_chunk", 8L, "edit_K", 17L, "edit_rows", 3L,
            "edit_suffix", 16L, "edit_prefix", 24L, "edit_targets", 64L, "edit_kl", 1L,
            "edit_tokens", 40L));
        m.put("slots", 2L);
        m.put("special_tokens", map("bos", 1L, "eos", 2L, "pad", 0L));
        m.put("programs", programs("model.pte"));
        m.put("edit", map("templates", new ArrayList<Object>(TEMPLATES), "objective",
            map("kl_factor", 0.0625, "kl_prompt", "{} is a", "weight_decay", 0.5,
                "clamp_norm_factor", 4.0), "mom2", true, "ridge", 1e-4, "weight_out_in", true));
        m.put("checks", map("export_seconds", 1.5, "capture_seconds", 0.5));
        m.put("recipe", recipeMap(16L));
        m.put("files", new LinkedHashMap<String, Object>());
        return m;
    }

    /**
     * The recipe as export/recipe.py writes it (the shipped MobiEditConfig() with FZOO's
     * {@code nDirs} = edit_K - 1; the manifest map's edit_K 17 gives 16; the default clamp ladder,
     * mobiedit/ladder.py's SEQUENTIAL_LADDER from LADDER_FROM_EDITS edits), without
     * {@code success.stop_on} as exported before it was written: the search stops on the loop's
     * rule ("loop"); tests of "written" set it (app.StopOnWrittenTest).
     */
    public static Map<String, Object> recipeMap(long nDirs) {
        Map<String, Object> zo = map("estimator", "fzoo", "n_dirs", nDirs, "h", 0.05, "optimizer",
            "adam", "lr", 0.5, "lr_min", 0.0, "lr_schedule", "constant", "momentum", 0.0, "beta1", 0.9,
            "beta2", 0.999, "adam_eps", 1e-8, "max_steps", 150L, "max_evals", 3000L, "check_every", 1L,
            "loss_tol", 0.0, "patience", 0L, "min_rel_improve", 0.0, "seed", 0L, "directions", "iid",
            "normalise", "spread");
        return map("zo", zo, "success", map("fraction", 0.75, "nll", 0.5), "ladder",
            map("fractions", new ArrayList<Object>(Arrays.asList(0.5, 0.75, 1.0)), "from_edits", 2L),
            "settle", map("rounds", 0L, "shrink", 0.8, "steps", 20L));
    }

    /** A feed with a [1, 1] int64 tensor under each of {@code names}. */
    public static Map<String, HostTensor> mapOf(List<String> names) {
        Map<String, HostTensor> out = new LinkedHashMap<>();
        for (String n : names) {
            out.put(n, HostTensor.i64(new long[] {1}, 1, 1));
        }
        return out;
    }

    /** Ordered map from alternating key, value arguments. */
    public static Map<String, Object> map(Object... kv) {
        Map<String, Object> m = new LinkedHashMap<>();
        for (int i = 0; i < kv.length; i += 2) {
            m.put((String) kv[i], kv[i + 1]);
        }
        return m;
    }

    /**
     * Write a bundle into {@code dir} as mobiedit export lays it out: fixture tokenizer, keystats
     * (identity C^-1 as its upper triangle, {@code base} [D_OUT, D_IN] as base_weight), a dummy
     * model.pte, an empty journal and a manifest listing the files with sizes and checksums.
     * Returns the manifest map written.
     */
    @SuppressWarnings("unchecked")
    public static Map<String, Object> writeBundle(File dir, float[] base) throws IOException {
        dir.mkdirs();
        Files.copy(resource("tokenizer.json").toPath(), new File(dir, "tokenizer.json").toPath());
        float[] triu = new float[D_IN * (D_IN + 1) / 2];
        for (int i = 0, k = 0; i < D_IN; i++) {
            for (int j = i; j < D_IN; j++, k++) {
                triu[k] = i == j ? 1f : 0f;
            }
        }
        Map<String, String> meta = new LinkedHashMap<>();
        meta.put("module", MODULE);
        Files.write(new File(dir, "keystats.safetensors").toPath(), Safetensors.write(Arrays.asList(
            Tensor.f32("c_inv_triu", new long[] {triu.length}, triu),
            Tensor.f32("base_weight", new long[] {D_OUT, D_IN}, base)), meta));
        Files.write(new File(dir, "model.pte").toPath(), "fake program".getBytes("UTF-8"));
        File journal = new File(dir, "journal");
        journal.mkdirs();
        Files.write(new File(journal, "journal.jsonl").toPath(), new byte[0]);
        Map<String, Object> m = manifestMap();
        Map<String, Object> files = (Map<String, Object>) m.get("files");
        for (String name : new String[] {"keystats.safetensors", "model.pte", "tokenizer.json"}) {
            File f = new File(dir, name);
            files.put(name, map("sha256", Sha256.hexOfFile(f), "bytes", f.length()));
        }
        Files.write(new File(dir, "manifest.json").toPath(),
            Json.write(m, true).getBytes("UTF-8"));
        return m;
    }

    /** The exported-bundle fixture (tools/make_bundle_fixture.py). */
    public static File exportedBundle() {
        return resource("exported_bundle");
    }

    /** A deterministic base weight [D_OUT, D_IN]. */
    public static float[] baseWeight() {
        float[] w = new float[D_OUT * D_IN];
        for (int i = 0; i < w.length; i++) {
            w[i] = (float) Math.sin(i + 1) * 0.1f;
        }
        return w;
    }
}
