package dev.mobiedit.demo.runtime;

import dev.mobiedit.demo.app.EditPrograms;
import dev.mobiedit.demo.app.ModelRuntime;
import dev.mobiedit.demo.app.PrefixState;
import dev.mobiedit.demo.core.EditBatch;
import dev.mobiedit.demo.core.LanguageModel;
import dev.mobiedit.demo.core.Manifest;
import dev.mobiedit.demo.core.MobiEditError;
import java.io.File;
import org.pytorch.executorch.EValue;
import org.pytorch.executorch.Module;
import org.pytorch.executorch.Tensor;

/**
 * The bundle's four ExecuTorch programs (org.pytorch:executorch-android), method "forward".
 * The input/output contract the app assumes is in android_demo/README.md ("Program contract");
 * it is implemented only here, so a change of the exporter touches this class alone:
 *
 * <pre>
 * prefill(tokens i64[1,C], start_pos i64[1], slot_u f32[S,d_out], slot_w f32[S,d_in], caches...)
 *     -> (logits f32[1,C,V], caches...)            C = shapes.prefill_chunk
 * decode (token i64[1,1], pos i64[1], slot_u, slot_w, caches...) -> (logits f32[1,1,V] or [1,V], caches...)
 *     caches: k, v f32[num_layers, 1, num_kv_heads, max_seq_len, head_dim], zeros at start,
 *     each call's trailing outputs are the next call's trailing inputs.
 * prefix (input_ids i64[R,T], attention_mask i64[R,T], subject_idx i64[R], last_idx i64[R],
 *         labels i64[R,T], slot_u, slot_w) -> (state..., k_bar f32[d_in], k_cur f32[d_in],
 *         out_cur f32[d_out], v_init f32[d_out])       R = edit_rows, T = edit_prefix + edit_suffix
 * edit   (state..., deltas f32[K,d_out]) -> (losses f32[K], correct f32[K,R-1])   K = edit_K
 * </pre>
 * Not thread-safe (one worker thread); Module.execute itself is locked per module.
 */
public final class ExecuTorchRuntime implements ModelRuntime {
    private final Manifest m;
    private final Module prefill;
    private final Module decode;
    private final Module prefixProgram;
    private final Module editProgram;
    private float[] slotU;
    private float[] slotW;

    private ExecuTorchRuntime(File dir, Manifest m) {
        this.m = m;
        prefill = load(dir, m, "prefill");
        decode = load(dir, m, "decode");
        prefixProgram = load(dir, m, "prefix");
        editProgram = load(dir, m, "edit");
        slotU = new float[m.slots * m.dOut()];
        slotW = new float[m.slots * m.dIn()];
    }

    /** Factory for BundleSession.open. */
    public static final ModelRuntime.Factory FACTORY = new ModelRuntime.Factory() {
        @Override
        public ModelRuntime open(File dir, Manifest manifest) {
            return new ExecuTorchRuntime(dir, manifest);
        }
    };

    private static Module load(File dir, Manifest m, String name) {
        File f = new File(dir, m.program(name));
        try {
            return Module.load(f.getAbsolutePath());
        } catch (RuntimeException e) {
            throw new MobiEditError("ExecuTorch cannot load the program (" + e.getMessage() + ")",
                f.getPath(), "re-export the bundle for this ExecuTorch version (1.0)", e);
        }
    }

    @Override
    public void setSlots(float[] u, float[] w) {
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
        prefill.destroy();
        decode.destroy();
        prefixProgram.destroy();
        editProgram.destroy();
    }

    private EValue f32(float[] data, long... shape) {
        return EValue.from(Tensor.fromBlob(data, shape));
    }

    private EValue i64(long[] data, long... shape) {
        return EValue.from(Tensor.fromBlob(data, shape));
    }

    private EValue[] slots() {
        return new EValue[] {f32(slotU, m.slots, m.dOut()), f32(slotW, m.slots, m.dIn())};
    }

    private static EValue[] run(Module p, String name, EValue[] in) {
        EValue[] out = p.execute("forward", in);
        if (out == null || out.length == 0) {
            throw new MobiEditError("returned no outputs", name + " program",
                "check the ExecuTorch log (adb logcat -s ExecuTorch) and re-export the bundle");
        }
        return out;
    }

    private static EValue[] concat(EValue[] a, EValue[] b, int bFrom) {
        EValue[] out = new EValue[a.length + b.length - bFrom];
        System.arraycopy(a, 0, out, 0, a.length);
        System.arraycopy(b, bFrom, out, a.length, b.length - bFrom);
        return out;
    }

    /** prefill/decode with the explicit KV cache of the contract. */
    private final class Chat implements LanguageModel {
        private EValue[] cache;
        private int len;

        @Override
        public float[] start(int[] ids) {
            long[] shape = {m.dims.numLayers, 1, m.dims.numKvHeads, m.shapes.maxSeqLen,
                m.dims.headDim};
            int n = (int) (shape[0] * shape[2] * shape[3] * shape[4]);
            cache = new EValue[] {f32(new float[n], shape), f32(new float[n], shape)};
            int c = m.shapes.prefillChunk;
            float[] logits = null;
            for (int start = 0; start < ids.length; start += c) {
                long[] chunk = new long[c];
                java.util.Arrays.fill(chunk, m.pad);
                int real = Math.min(c, ids.length - start);
                for (int i = 0; i < real; i++) {
                    chunk[i] = ids[start + i];
                }
                EValue[] head = {i64(chunk, 1, c), i64(new long[] {start}, 1)};
                EValue[] out = run(prefill, "prefill", concat(concat(head, slots(), 0), cache, 0));
                cache = java.util.Arrays.copyOfRange(out, 1, out.length);
                logits = row(out[0].toTensor().getDataAsFloatArray(), real - 1);
            }
            len = ids.length;
            return logits;
        }

        @Override
        public float[] next(int id) {
            EValue[] head = {i64(new long[] {id}, 1, 1), i64(new long[] {len}, 1)};
            EValue[] out = run(decode, "decode", concat(concat(head, slots(), 0), cache, 0));
            cache = java.util.Arrays.copyOfRange(out, 1, out.length);
            len++;
            float[] all = out[0].toTensor().getDataAsFloatArray();
            return row(all, all.length / m.dims.vocabSize - 1);
        }

        @Override
        public int maxLength() {
            return m.shapes.maxSeqLen;
        }

        private float[] row(float[] logits, int r) {
            int v = m.dims.vocabSize;
            return java.util.Arrays.copyOfRange(logits, r * v, (r + 1) * v);
        }
    }

    /** prefix + edit programs. */
    private final class Edit implements EditPrograms {
        @Override
        public PrefixState prefix(EditBatch b, float[] u, float[] w) {
            EValue[] in = {i64(b.inputIds, b.rows, b.width), i64(b.attentionMask, b.rows, b.width),
                i64(b.subjectIdx, b.rows), i64(b.lastIdx, b.rows), i64(b.labels, b.rows, b.width),
                f32(u, m.slots, m.dOut()), f32(w, m.slots, m.dIn())};
            EValue[] out = run(prefixProgram, "prefix", in);
            int n = out.length;
            if (n < 4) {
                throw new MobiEditError("returned " + n + " outputs, expected state + k_bar, k_cur,"
                    + " out_cur, v_init", "prefix program", "re-export the bundle");
            }
            EValue[] state = java.util.Arrays.copyOfRange(out, 0, n - 4);
            return new PrefixState(state, out[n - 4].toTensor().getDataAsFloatArray(),
                out[n - 3].toTensor().getDataAsFloatArray(),
                out[n - 2].toTensor().getDataAsFloatArray(),
                out[n - 1].toTensor().getDataAsFloatArray());
        }

        @Override
        public void edit(PrefixState st, float[] deltas, float[] losses, float[] correct) {
            EValue[] state = (EValue[]) st.handle;
            EValue[] in = concat(state, new EValue[] {f32(deltas, batchRows(), m.dOut())}, 0);
            EValue[] out = run(editProgram, "edit", in);
            float[] l = out[0].toTensor().getDataAsFloatArray();
            if (l.length != losses.length) {
                throw new MobiEditError("returned " + l.length + " losses for " + losses.length
                    + " rows", "edit program", "re-export the bundle (shapes.edit_K mismatch)");
            }
            System.arraycopy(l, 0, losses, 0, l.length);
            if (out.length > 1) {
                float[] c = out[1].toTensor().getDataAsFloatArray();
                System.arraycopy(c, 0, correct, 0, Math.min(c.length, correct.length));
            }
        }

        @Override
        public int batchRows() {
            return m.shapes.editK;
        }
    }
}
