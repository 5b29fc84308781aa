package dev.mobiedit.demo.app;

/**
 * What the bundle's prefix program computes once per edit: an opaque program state (the edit
 * program's leading inputs: suffix hidden states, prefix K/V, masks, read-outs, KL reference...)
 * and the four vectors the rank-one update needs (mobiedit.rome.compute_k.compute_key and the
 * search scale):
 * {@code kBar} key averaged over the context templates [d_in], {@code kCur} key of the plain
 * rewrite prompt [d_in], {@code outCur} the edited module's output there [d_out] (= W k_cur with
 * the active slots), {@code vInit} the value the search starts from [d_out].
 */
public final class PrefixState {
    public final Object handle;
    public final float[] kBar;
    public final float[] kCur;
    public final float[] outCur;
    public final float[] vInit;

    public PrefixState(Object handle, float[] kBar, float[] kCur, float[] outCur, float[] vInit) {
        this.handle = handle;
        this.kBar = kBar;
        this.kCur = kCur;
        this.outCur = outCur;
        this.vInit = vInit;
    }
}
