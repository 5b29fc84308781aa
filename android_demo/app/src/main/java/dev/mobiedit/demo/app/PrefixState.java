package dev.mobiedit.demo.app;

/**
 * What the bundle's prefix program gives one edit: an opaque program state (the edit program's
 * inputs other than the deltas: suffix hidden states, prefix K/V, rotary tables, mask, read-outs,
 * KL reference, wd_scale) and the four vectors the rank-one update needs, as
 * mobiedit.export.ops computes them from the program's {@code keys} [B, d_in] and
 * {@code values} [B, d_out]: {@code kBar} = mean of the rewrite rows' keys [d_in],
 * {@code kCur} = keys[0] (the plain rewrite prompt) [d_in], {@code outCur} = values[0] (the edited
 * module's output there, with the active slots) [d_out] and {@code vInit} = values[0], the value
 * the search starts from [d_out].
 */
public final class PrefixState {
    public final Object handle;
    public final float[] kBar;
    public final float[] kCur;
    public final float[] outCur;
    public final float[] vInit;
    /**
     * The rewrite rows' keys [nRewrite, d_in] row-major (row 0 = kCur): what the "rows" write rule
     * solves over ({@code KeyStats.rowsDirection}); null when the state was built from the four
     * vectors alone (then only ROME's direction can be written).
     */
    public final float[] rewriteKeys;
    public final int nRewrite;

    public PrefixState(Object handle, float[] kBar, float[] kCur, float[] outCur, float[] vInit) {
        this(handle, kBar, kCur, outCur, vInit, null, 0);
    }

    public PrefixState(Object handle, float[] kBar, float[] kCur, float[] outCur, float[] vInit,
            float[] rewriteKeys, int nRewrite) {
        this.handle = handle;
        this.kBar = kBar;
        this.kCur = kCur;
        this.outCur = outCur;
        this.vInit = vInit;
        this.rewriteKeys = rewriteKeys;
        this.nRewrite = nRewrite;
    }

    /**
     * The state of prefix outputs {@code keys} [rows, dIn] and {@code values} [rows, dOut]
     * (row-major) whose first {@code nRewrite} rows are the rewrite prompts.
     */
    public static PrefixState fromKeysValues(Object handle, float[] keys, float[] values,
            int nRewrite, int dIn, int dOut) {
        float[] kBar = new float[dIn];
        for (int i = 0; i < dIn; i++) {
            double acc = 0;
            for (int r = 0; r < nRewrite; r++) {
                acc += keys[r * dIn + i];
            }
            kBar[i] = (float) (acc / nRewrite);
        }
        float[] kCur = java.util.Arrays.copyOf(keys, dIn);
        float[] v = java.util.Arrays.copyOf(values, dOut);
        return new PrefixState(handle, kBar, kCur, v, v.clone(),
            java.util.Arrays.copyOf(keys, nRewrite * dIn), nRewrite);
    }
}
