package dev.mobiedit.demo.app;

import dev.mobiedit.demo.core.EditBatch;
import dev.mobiedit.demo.core.Fixtures;

/**
 * A stand-in for the bundle's prefix + edit programs: loss(delta) = ||delta - TARGET||^2 /
 * ||TARGET||^2 per row (zero-padded rows included), "correct" = 1 for every rewrite prompt when
 * the loss is below {@link #holdsBelow}. The prefix state is fixed: ||v_init|| = sqrt(d) (scale 1).
 */
public class QuadraticPrograms implements EditPrograms {
    public static final int D = Fixtures.D_OUT;
    public static final int D_IN = Fixtures.D_IN;
    public static final float[] TARGET = {0.5f, -1f, 0.25f, 2f, -0.75f, 1f, 0f, -1.5f};
    private final int batchRows;
    public double holdsBelow = 0.02;
    public int prefixCalls;
    public int editCalls;
    public EditBatch lastBatch;
    public float[] lastSlotU;

    public QuadraticPrograms(int batchRows) {
        this.batchRows = batchRows;
    }

    public static PrefixState state() {
        float[] kBar = new float[D_IN];
        float[] kCur = new float[D_IN];
        for (int i = 0; i < D_IN; i++) {
            kBar[i] = 1f + 0.1f * i;
            kCur[i] = 1f - 0.05f * i;
        }
        float[] out = new float[D];
        float[] vInit = new float[D];
        for (int i = 0; i < D; i++) {
            out[i] = 0.3f * (i - 3);
            vInit[i] = 1f;
        }
        return new PrefixState("state", kBar, kCur, out, vInit);
    }

    static double loss(float[] deltas, int row) {
        double s = 0;
        double n = 0;
        for (int i = 0; i < D; i++) {
            double e = deltas[row * D + i] - TARGET[i];
            s += e * e;
            n += TARGET[i] * TARGET[i];
        }
        return s / n;
    }

    @Override
    public PrefixState prefix(EditBatch batch, float[] slotU, float[] slotW) {
        prefixCalls++;
        lastBatch = batch;
        lastSlotU = slotU.clone();
        return state();
    }

    @Override
    public void edit(PrefixState st, float[] deltas, float[] losses, float[] correct) {
        if (!"state".equals(st.handle) || deltas.length != batchRows * D) {
            throw new IllegalArgumentException("edit program: wrong state or deltas of length " + deltas.length);
        }
        editCalls++;
        int nRewrite = correct.length / batchRows;
        for (int r = 0; r < batchRows; r++) {
            double l = loss(deltas, r);
            losses[r] = (float) l;
            for (int j = 0; j < nRewrite; j++) {
                correct[r * nRewrite + j] = l < holdsBelow ? 1f : 0.5f;
            }
        }
    }

    @Override
    public int batchRows() {
        return batchRows;
    }
}
