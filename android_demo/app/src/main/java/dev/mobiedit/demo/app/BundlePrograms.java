package dev.mobiedit.demo.app;

import dev.mobiedit.demo.core.EditPack;
import dev.mobiedit.demo.core.HostTensor;
import dev.mobiedit.demo.core.LanguageModel;
import dev.mobiedit.demo.core.Manifest;
import dev.mobiedit.demo.core.ManifestFields;
import dev.mobiedit.demo.core.MobiEditError;
import java.util.Arrays;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/**
 * The app's side of the program contract (docs/bundle_format.md "Program interfaces",
 * export/graphs.py): builds each program's named inputs, puts them in the order of the manifest's
 * {@code programs.<role>.inputs}, runs {@code programs.<role>.method} through a
 * {@link ProgramExecutor} and reads the outputs by {@code programs.<role>.outputs}. Host-side
 * work as in mobiedit.export.generate (KV cache) and mobiedit.export.ops / packing (edit feeds).
 *
 * <pre>
 * prefill (C = prefill_chunk) / decode (C = 1):
 *   tokens i64[1,C], start i64[1], logit_index i64[1], kv_cache f32[2L,Hkv,T,hd], slot_u f32[S,d_out],
 *   slot_w f32[S,d_in]  -&gt;  logits f32[1,V] (at logit_index), new_kv f32[2L,Hkv,C,hd]
 *   (the host keeps the cache and writes new_kv's real positions at start)
 * prefix: input_ids i64[B,N], suffix_pos i64[B,S], subject_pos i64[B],
 *   kl_index i64[R_kl] (b*N + last_b), slot_u, slot_w
 *   -&gt;  h_suffix, prefix_kv, [cos, sin], kl_ref, keys f32[B,d_in], values f32[B,d_out]
 * edit: deltas f32[K,d_out], h_suffix, prefix_kv, mask i64[B,1,S,P+S] (1 = may attend),
 *   [cos, sin], target_index, target_label, target_weight, target_rows (1 at the read-out's row),
 *   kl_suffix_index i64[R_kl] (b*S + j), kl_ref, kl_weight, wd_scale f32[1]
 *   -&gt;  losses f32[K], correct f32[K,B] (count of each row's argmax targets, an exact integer)
 * </pre>
 * The manifest's order is authoritative; a program that takes an input this app cannot build, or
 * lacks an output it reads, is refused when the bundle is opened. Not thread-safe (one worker
 * thread).
 */
public final class BundlePrograms implements ModelRuntime {
    private static final String[] STEP_IN =
        {"tokens", "start", "logit_index", "kv_cache", "slot_u", "slot_w"};
    private static final String[] STEP_OUT = {"logits", "new_kv"};
    private static final String[] PREFIX_IN =
        {"input_ids", "suffix_pos", "subject_pos", "kl_index", "slot_u", "slot_w"};
    private static final String[] PREFIX_OUT = {"h_suffix", "prefix_kv", "kl_ref", "keys", "values"};
    /** Prefix outputs that are passed on to the edit program unchanged (cos / sin: rotary only). */
    private static final String[] STATE = {"h_suffix", "prefix_kv", "cos", "sin", "kl_ref"};
    private static final String[] EDIT_IN = {"deltas", "h_suffix", "prefix_kv", "mask", "cos",
        "sin", "target_index", "target_label", "target_weight", "target_rows", "kl_suffix_index",
        "kl_ref", "kl_weight", "wd_scale"};
    private static final String[] EDIT_OUT = {"losses", "correct"};
    /** The fix when the programs' inputs / outputs are not the ones this app builds / reads. */
    private static final String MATCH_APP =
        "use an app version that matches this bundle's exporter";

    private final Manifest m;
    private final ProgramExecutor exec;
    private float[] slotU;
    private float[] slotW;

    public BundlePrograms(Manifest m, ProgramExecutor exec) {
        checkContract(m);
        this.m = m;
        this.exec = exec;
        slotU = new float[m.slots * m.dOut()];
        slotW = new float[m.slots * m.dIn()];
    }

    /**
     * Refuse a bundle whose programs take inputs this app cannot build or lack outputs it reads
     * (names per role as in export/graphs.py io()). Input order is free: it comes from the
     * manifest.
     */
    public static void checkContract(Manifest m) {
        check(m, "prefill", STEP_IN, STEP_OUT);
        check(m, "decode", STEP_IN, STEP_OUT);
        check(m, "prefix", PREFIX_IN, PREFIX_OUT);
        check(m, "edit", EDIT_IN, EDIT_OUT);
        boolean rotaryOut = m.program("prefix").outputs.contains("cos");
        boolean rotaryIn = m.program("edit").inputs.contains("cos");
        if (rotaryOut != rotaryIn || rotaryIn != m.program("edit").inputs.contains("sin")
                || rotaryOut != m.program("prefix").outputs.contains("sin")) {
            throw ManifestFields.err("programs", "the prefix program's outputs and the edit"
                + " program's inputs disagree on the rotary tables cos / sin",
                ManifestFields.REEXPORT);
        }
    }

    /** The input names this app can build for {@code role}. */
    public static List<String> knownInputs(String role) {
        return Arrays.asList(role.equals("prefix") ? PREFIX_IN : role.equals("edit") ? EDIT_IN
            : STEP_IN);
    }

    private static void check(Manifest m, String role, String[] in, String[] out) {
        Manifest.Program p = m.program(role);
        List<String> known = Arrays.asList(in);
        for (String name : p.inputs) {
            if (!known.contains(name)) {
                throw ManifestFields.err("programs." + role + ".inputs", "the " + role
                    + " program takes input '" + name + "', which this app does not build (it"
                    + " builds " + known + ")", MATCH_APP);
            }
        }
        for (String name : in) {
            boolean optional = name.equals("cos") || name.equals("sin");
            if (!optional && !p.inputs.contains(name)) {
                throw ManifestFields.err("programs." + role + ".inputs", "the " + role
                    + " program does not take '" + name + "'", MATCH_APP);
            }
        }
        for (String name : out) {
            if (!p.outputs.contains(name)) {
                throw ManifestFields.err("programs." + role + ".outputs", "the " + role
                    + " program has no output '" + name + "'", MATCH_APP);
            }
        }
    }

    /** {@code feed} in the order of {@code p.inputs}; MobiEditError if one is missing. */
    public static HostTensor[] order(Manifest.Program p, Map<String, HostTensor> feed) {
        HostTensor[] in = new HostTensor[p.inputs.size()];
        for (int i = 0; i < in.length; i++) {
            in[i] = feed.get(p.inputs.get(i));
            if (in[i] == null) {
                throw new MobiEditError("no value for input '" + p.inputs.get(i) + "'",
                    p.role + " program", "report this: the app and the bundle disagree");
            }
        }
        return in;
    }

    /** Run {@code role} on the named {@code feed}; returns the outputs by name. */
    Map<String, HostTensor> run(String role, Map<String, HostTensor> feed) throws Exception {
        Manifest.Program p = m.program(role);
        HostTensor[] out = exec.execute(p, order(p, feed));
        if (out == null || out.length != p.outputs.size()) {
            throw new MobiEditError("returned " + (out == null ? 0 : out.length)
                + " outputs, the manifest lists " + p.outputs, role + " program (method '"
                + p.method + "' of " + p.file + ")",
                "check the ExecuTorch log (adb logcat -s ExecuTorch) and re-export the bundle");
        }
        Map<String, HostTensor> named = new HashMap<String, HostTensor>();
        for (int i = 0; i < out.length; i++) {
            named.put(p.outputs.get(i), out[i]);
        }
        return named;
    }

    private static float[] floats(Map<String, HostTensor> out, String name, int length,
            String role) {
        HostTensor t = out.get(name);
        if (t == null || t.dtype != HostTensor.DType.F32 || t.numel() != length) {
            throw new MobiEditError("output '" + name + "' is " + (t == null ? "missing"
                : t.describe()) + ", expected " + length + " float32 values", role + " program",
                "re-export the bundle with this app's version of mobiedit");
        }
        return t.floats();
    }

    private HostTensor[] slots() {
        return new HostTensor[] {HostTensor.f32(slotU, m.slots, m.dOut()),
            HostTensor.f32(slotW, m.slots, m.dIn())};
    }

    private Map<String, HostTensor> withSlots(Map<String, HostTensor> feed, float[] u,
            float[] w) {
        feed.put("slot_u", HostTensor.f32(u, m.slots, m.dOut()));
        feed.put("slot_w", HostTensor.f32(w, m.slots, m.dIn()));
        return feed;
    }

    @Override
    public void setSlots(float[] u, float[] w) {
        if (u.length != m.slots * m.dOut() || w.length != m.slots * m.dIn()) {
            throw new IllegalArgumentException("slots: u[" + u.length + "], w[" + w.length + "]");
        }
        slotU = u.clone();
        slotW = w.clone();
    }

    @Override
    public LanguageModel chat() {
        return new Chat();
    }

    @Override
    public EditPrograms edit() {
        return new Edit();
    }

    @Override
    public void close() {
        exec.close();
    }

    /** Greedy decoding state: the host-side KV cache [2L, Hkv, T, hd] (mobiedit.export.generate). */
    private final class Chat implements LanguageModel {
        private final int rows = 2 * m.dims.numLayers * m.dims.numKvHeads;
        private final int t = m.shapes.maxSeqLen;
        private final int hd = m.dims.headDim;
        private final float[] cache = new float[rows * t * hd];
        private int len;

        @Override
        public float[] start(int[] ids) throws Exception {
            if (ids.length == 0 || ids.length >= t) {
                throw new MobiEditError("prompt has " + ids.length + " tokens, the cache holds " + t,
                    "prompt", "type a shorter prompt, or re-export with a larger max_seq_len");
            }
            Arrays.fill(cache, 0f);
            int c = m.shapes.prefillChunk;
            float[] logits = null;
            for (int start = 0; start < ids.length; start += c) {
                int real = Math.min(c, ids.length - start);
                long[] chunk = new long[c];
                for (int i = 0; i < real; i++) {
                    chunk[i] = ids[start + i];
                }
                logits = step("prefill", chunk, start, real);
            }
            len = ids.length;
            return logits;
        }

        @Override
        public float[] next(int id) throws Exception {
            if (len >= t) {
                throw new MobiEditError("the KV cache is full (" + t + " positions)", "chat",
                    "start a new prompt, or re-export with a larger max_seq_len");
            }
            float[] logits = step("decode", new long[] {id}, len, 1);
            len++;
            return logits;
        }

        @Override
        public int maxLength() {
            return t;
        }

        /** One prefill / decode call of {@code tokens} at {@code start}; {@code real} are real. */
        private float[] step(String role, long[] tokens, int start, int real) throws Exception {
            int c = tokens.length;
            Map<String, HostTensor> feed = new LinkedHashMap<String, HostTensor>();
            feed.put("tokens", HostTensor.i64(tokens, 1, c));
            feed.put("start", HostTensor.i64(new long[] {start}, 1));
            feed.put("logit_index", HostTensor.i64(new long[] {real - 1}, 1));
            feed.put("kv_cache", HostTensor.f32(cache, rows / m.dims.numKvHeads,
                m.dims.numKvHeads, t, hd));
            HostTensor[] s = slots();
            feed.put("slot_u", s[0]);
            feed.put("slot_w", s[1]);
            Map<String, HostTensor> out = run(role, feed);
            float[] kv = floats(out, "new_kv", rows * c * hd, role);
            for (int r = 0; r < rows; r++) {
                System.arraycopy(kv, r * c * hd, cache, (r * t + start) * hd, real * hd);
            }
            return floats(out, "logits", m.dims.vocabSize, role);
        }
    }

    /** prefix + edit programs over the feeds of {@link EditPack}. */
    private final class Edit implements EditPrograms {
        @Override
        public PrefixState prefix(EditPack pack, float[] u, float[] w) throws Exception {
            Map<String, HostTensor> feed = new LinkedHashMap<String, HostTensor>(pack.prefixFeed());
            Map<String, HostTensor> out = run("prefix", withSlots(feed, u, w));
            int rows = m.shapes.editRows;
            float[] keys = floats(out, "keys", rows * m.dIn(), "prefix");
            float[] values = floats(out, "values", rows * m.dOut(), "prefix");
            Map<String, HostTensor> state = new LinkedHashMap<String, HostTensor>(pack.staticFeed());
            for (String name : STATE) {
                if (out.containsKey(name)) {
                    state.put(name, out.get(name));
                }
            }
            PrefixState st = PrefixState.fromKeysValues(state, keys, values, pack.nRewrite,
                m.dIn(), m.dOut());
            state.put("wd_scale", pack.wdScale(st.vInit));
            return st;
        }

        @Override
        @SuppressWarnings("unchecked")
        public void edit(PrefixState st, float[] deltas, float[] losses, float[] correct)
                throws Exception {
            int k = m.shapes.editK;
            int d = deltas.length / k;
            Map<String, HostTensor> feed =
                new LinkedHashMap<String, HostTensor>((Map<String, HostTensor>) st.handle);
            feed.put("deltas", HostTensor.f32(deltas, k, d));
            Map<String, HostTensor> out = run("edit", feed);
            System.arraycopy(floats(out, "losses", k, "edit"), 0, losses, 0, k);
            int rows = m.shapes.editRows;
            float[] c = floats(out, "correct", k * rows, "edit");
            int nRewrite = correct.length / k;
            for (int r = 0; r < k; r++) {
                System.arraycopy(c, r * rows, correct, r * nRewrite, nRewrite);
            }
        }

        @Override
        public int batchRows() {
            return m.shapes.editK;
        }
    }
}
