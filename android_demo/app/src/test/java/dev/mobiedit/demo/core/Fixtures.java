package dev.mobiedit.demo.core;

import java.io.File;
import java.io.IOException;
import java.net.URISyntaxException;
import java.net.URL;
import java.nio.file.Files;
import java.util.Arrays;
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

    /** A valid manifest map (files filled by {@link #writeBundle}); edit_rows = 3 by default. */
    public static Map<String, Object> manifestMap() {
        Map<String, Object> m = new LinkedHashMap<>();
        m.put("format_version", 1L);
        m.put("created_by", "mobiedit 0.1.0");
        m.put("runtime", "executorch");
        m.put("model_family", "llama");
        m.put("quantization", "fp32");
        m.put("edit_layer", 1L);
        m.put("edit_module", MODULE);
        m.put("dims", map("vocab_size", 400L, "hidden_size", (long) D_OUT, "intermediate_size",
            (long) D_IN, "num_layers", 2L, "num_heads", 2L, "num_kv_heads", 2L, "head_dim", 4L));
        m.put("shapes", map("max_seq_len", 64L, "prefill_chunk", 8L, "edit_K", 17L, "edit_rows", 3L,
            "edit_suffix", 16L, "edit_prefix", 24L, "edit_readouts", 64L));
        m.put("slots", 2L);
        m.put("special_tokens", map("bos", 1L, "eos", 2L, "pad", 0L));
        m.put("programs", map("prefill", "prefill.pte", "decode", "decode.pte", "edit", "edit.pte",
            "prefix", "prefix.pte"));
        m.put("files", new LinkedHashMap<String, Object>());
        return m;
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
     * Write a bundle into {@code dir}: fixture tokenizer, identity keystats, dummy program files,
     * journal/base.safetensors holding {@code base} [D_OUT, D_IN], and a manifest listing all of
     * them with sizes and checksums. Returns the manifest map written.
     */
    @SuppressWarnings("unchecked")
    public static Map<String, Object> writeBundle(File dir, float[] base) throws IOException {
        dir.mkdirs();
        Files.copy(resource("tokenizer.json").toPath(), new File(dir, "tokenizer.json").toPath());
        float[] eye = new float[D_IN * D_IN];
        for (int i = 0; i < D_IN; i++) {
            eye[i * D_IN + i] = 1f;
        }
        Files.write(new File(dir, "keystats.safetensors").toPath(), Safetensors.write(
            Arrays.asList(Tensor.f32("c_inv", new long[] {D_IN, D_IN}, eye)), null));
        for (String p : new String[] {"prefill", "decode", "edit", "prefix"}) {
            Files.write(new File(dir, p + ".pte").toPath(), ("fake program " + p).getBytes("UTF-8"));
        }
        File journal = new File(dir, "journal");
        journal.mkdirs();
        Files.write(new File(journal, "base.safetensors").toPath(), Safetensors.write(
            Arrays.asList(Tensor.f32(MODULE, new long[] {D_OUT, D_IN}, base)), null));
        Map<String, Object> m = manifestMap();
        Map<String, Object> files = (Map<String, Object>) m.get("files");
        for (String name : new String[] {"tokenizer.json", "keystats.safetensors", "prefill.pte",
            "decode.pte", "edit.pte", "prefix.pte"}) {
            File f = new File(dir, name);
            files.put(name, map("sha256", Sha256.hexOfFile(f), "bytes", f.length()));
        }
        Files.write(new File(dir, "manifest.json").toPath(),
            Json.write(m, true).getBytes("UTF-8"));
        return m;
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
