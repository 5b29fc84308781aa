package dev.mobiedit.demo.app;

import dev.mobiedit.demo.core.EditPack;
import dev.mobiedit.demo.core.Fixtures;
import java.util.ArrayList;
import java.util.List;

/**
 * A stand-in for the bundle's prefix + edit programs: loss(delta) = ||shift + delta - TARGET||^2 /
 * ||TARGET||^2 + {@link #lossOffset} per row (zero-padded rows included), where shift is what the
 * rank-one slots add at the plain prompt's key, {@link #writeGain} * sum_s u_s (w_s . k_cur) (a
 * written edit moves the value by its u, since w . k_cur = 1); "correct" = target_len (every
 * target token is the argmax) for every rewrite prompt when the quadratic part is below
 * {@link #holdsBelow}, else target_len - 1; the rewrite row {@link #wrongRow} (if >= 0) is never
 * fully correct. v_init = ones whatever the slots, ||v_init|| = sqrt(d) (scale 1).
 */
public class QuadraticPrograms implements EditPrograms {
    public static final int D = Fixtures.D_OUT;
    public static final int D_IN = Fixtures.D_IN;
    public static final float[] TARGET = {0.5f, -1f, 0.25f, 2f, -0.75f, 1f, 0f, -1.5f};
    private final int batchRows;
    public double holdsBelow = 0.02;
    /** Added to every loss (shifts the loss the success margin sees, not the search). */
    public double lossOffset = 0;
    /** A rewrite row that never shows the whole target (-1: none). */
    public int wrongRow = -1;
    /** How much of the slots' change reaches the programs (1: as searched; 0.5: half of it). */
    public double writeGain = 1.0;
    public int prefixCalls;
    public int editCalls;
    public EditPack lastPack;
    public float[] lastSlotU;
    /** slot_u of every prefix call, in order. */
    public final List<float[]> slotUs = new ArrayList<>();
    /** deltas of every edit-program call, in order. */
    public final List<float[]> deltasSeen = new ArrayList<>();

    public QuadraticPrograms(int batchRows) {
        this.batchRows = batchRows;
    }

    /** The prefix state with empty slots (its handle: the shift, zeros). */
    public static PrefixState state() {
        return state(new float[D]);
    }

    static PrefixState state(float[] shift) {
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
        return new PrefixState(shift, kBar, kCur, out, vInit);
    }

    static double loss(float[] deltas, int row) {
        return loss(deltas, row, new float[D]);
    }

    static double loss(float[] deltas, int row, float[] shift) {
        double s = 0;
        double n = 0;
        for (int i = 0; i < D; i++) {
            double e = shift[i] + deltas[row * D + i] - TARGET[i];
            s += e * e;
            n += TARGET[i] * TARGET[i];
        }
        return s / n;
    }

    @Override
    public PrefixState prefix(EditPack pack, float[] slotU, float[] slotW) {
        prefixCalls++;
        lastPack = pack;
        lastSlotU = slotU.clone();
        slotUs.add(slotU.clone());
        float[] kCur = state().kCur;
        float[] shift = new float[D];
        for (int s = 0; s < slotU.length / D; s++) {
            double dot = 0;
            for (int j = 0; j < D_IN; j++) {
                dot += (double) slotW[s * D_IN + j] * kCur[j];
            }
            for (int i = 0; i < D; i++) {
                shift[i] += (float) (writeGain * slotU[s * D + i] * dot);
            }
        }
        return state(shift);
    }

    @Override
    public void edit(PrefixState st, float[] deltas, float[] losses, float[] correct) {
        if (!(st.handle instanceof float[]) || deltas.length != batchRows * D) {
            throw new IllegalArgumentException("edit program: wrong state or deltas of length " + deltas.length);
        }
        editCalls++;
        deltasSeen.add(deltas.clone());
        float[] shift = (float[]) st.handle;
        int nRewrite = correct.length / batchRows;
        int targetLen = lastPack.targetLen;
        for (int r = 0; r < batchRows; r++) {
            double l = loss(deltas, r, shift);
            losses[r] = (float) (l + lossOffset);
            for (int j = 0; j < nRewrite; j++) {
                correct[r * nRewrite + j] = l < holdsBelow && j != wrongRow ? targetLen : targetLen - 1;
            }
        }
    }

    @Override
    public int batchRows() {
        return batchRows;
    }
}
