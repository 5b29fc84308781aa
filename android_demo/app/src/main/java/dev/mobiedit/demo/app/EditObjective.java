package dev.mobiedit.demo.app;

import dev.mobiedit.demo.jni.NativeEngine;
import java.util.concurrent.atomic.AtomicBoolean;

/**
 * The engine's two callbacks on top of the edit program. The engine searches in normalised units
 * z (delta = z * scale, scale = ||v_init|| / sqrt(d), as mobiedit/methods/mobiedit.py); the
 * engine's K rows are fed to the program in chunks of its static batch (shapes.edit_K), the
 * last chunk zero-padded. The success check is {@link SuccessCriterion} (the toolchain's rule:
 * the plain rewrite prompt fully correct, at least success_fraction of all rewrite rows fully
 * correct, and loss minus its decay term at most success_nll). With a {@link Written} check
 * (recipe {@code success.stop_on} "written", {@link EditRunner}) the loop's check also asks,
 * where that rule passes, whether the edit written from the delta holds (mobiedit/driver.py
 * search_value's {@code confirm}); a FALSE verdict refuses the stop and the loop goes on.
 * Each point is scored once (mobiedit/driver.py search_value's {@code reuse_checked}): a step whose
 * row 0 is the delta the last check scored (FZOO's base row after an update, check_at "update")
 * takes that row's loss from the check; a check of the point the last step's row 0 evaluated
 * (check_at "base") reads that row — no program call.
 * Setting {@code cancel} makes the next callback throw.
 */
public final class EditObjective implements NativeEngine.Forward, NativeEngine.Check {
    /** The written edit's verdict at a delta (verify after write, {@link EditRunner}). */
    public interface Written {
        /**
         * Whether the edit written from {@code delta} [d] (model units) holds; null when it
         * cannot be taken (every slot taken), which does not refuse the stop.
         */
        Boolean holds(float[] delta) throws Exception;
    }

    private final EditPrograms programs;
    private final PrefixState state;
    private final int d;
    private final float scale;
    private final int nRewrite;
    private final int targetLen;
    private final double weightDecay;
    private final float[] vInit;
    private final SuccessCriterion success;
    private final AtomicBoolean cancel;
    private final Written written;
    private final float[] deltas;
    private final float[] losses;
    private final float[] correct;
    private float[] checkedZ;  // the last check's z [d] (null: none yet), its loss and row counts
    private float checkedLoss;
    private float[] checkedCorrect;
    private float[] baseZ;  // the last step's row 0 z [d] (null: none yet), its loss and row counts
    private float baseLoss;
    private float[] baseCorrect;
    private long evals;
    private long calls;
    private long writtenChecks;
    private long writtenRefused;

    /**
     * {@code targetLen}: the target's token count; a rewrite prompt holds when the edit program
     * counts exactly that many argmax targets in it (the count is a float32 sum of 0/1 terms,
     * hence exact; mobiedit.export.ops checks it the same way). {@code weightDecay}:
     * edit.objective.weight_decay; with {@code state.vInit} it gives the decay term the margin
     * leaves out. {@code success}: the thresholds (the bundle recipe's, {@link EditRunner};
     * {@link SuccessCriterion#shippedFallback} if null).
     */
    public EditObjective(EditPrograms programs, PrefixState state, int d, float scale,
            int nRewrite, int targetLen, double weightDecay, SuccessCriterion success,
            AtomicBoolean cancel) {
        this(programs, state, d, scale, nRewrite, targetLen, weightDecay, success, cancel, null);
    }

    /**
     * With {@code written} (null: the loop's rule alone, stop_on "loop") the check
     * ({@link #passes}) also needs the written edit at the delta not to fail.
     */
    public EditObjective(EditPrograms programs, PrefixState state, int d, float scale,
            int nRewrite, int targetLen, double weightDecay, SuccessCriterion success,
            AtomicBoolean cancel, Written written) {
        this.programs = programs;
        this.state = state;
        this.d = d;
        this.scale = scale;
        this.nRewrite = nRewrite;
        this.targetLen = targetLen;
        this.weightDecay = weightDecay;
        this.vInit = state.vInit;
        this.success = success != null ? success : SuccessCriterion.shippedFallback();
        this.cancel = cancel;
        this.written = written;
        int b = programs.batchRows();
        deltas = new float[b * d];
        losses = new float[b];
        correct = new float[b * nRewrite];
    }

    /** Search scale s = ||v_init|| / sqrt(d). */
    public static float scaleOf(float[] vInit) {
        double ss = 0;
        for (float v : vInit) {
            ss += (double) v * v;
        }
        return (float) (Math.sqrt(ss) / Math.sqrt(vInit.length));
    }

    @Override
    public void forward(float[] z, int rows, int dd, float[] lossesOut) throws Exception {
        int b = programs.batchRows();
        int skip = rows > 0 && sameRow(z, checkedZ) ? 1 : 0;
        if (skip == 1) {
            lossesOut[0] = checkedLoss;
            baseZ = checkedZ;
            baseLoss = checkedLoss;
            baseCorrect = checkedCorrect;
        }
        for (int start = skip; start < rows; start += b) {
            int n = Math.min(b, rows - start);
            fill(z, start, n);
            run();
            System.arraycopy(losses, 0, lossesOut, start, n);
            if (start == 0) {
                baseZ = java.util.Arrays.copyOf(z, d);
                baseLoss = losses[0];
                baseCorrect = java.util.Arrays.copyOf(correct, nRewrite);
            }
            evals += n;
        }
    }

    @Override
    public boolean check(float[] x, int dd) throws Exception {
        return passes(x);
    }

    /**
     * The loop's check: {@link #holds} at x and, with a {@link Written} check, the written edit
     * of delta = x * scale not FALSE (counted in {@link #writtenChecks}, a FALSE one also in
     * {@link #writtenRefused}). Without one, exactly {@link #holds}.
     */
    public boolean passes(float[] x) throws Exception {
        boolean held = holds(x);
        if (!held || written == null) {
            return held;
        }
        if (cancel != null && cancel.get()) {
            throw new Cancelled();
        }
        writtenChecks++;
        boolean ok = written.holds(java.util.Arrays.copyOf(deltas, d)) != Boolean.FALSE;
        if (!ok) {
            writtenRefused++;
        }
        return ok;
    }

    /**
     * True if delta = x * scale passes the success check ({@link SuccessCriterion}): the plain
     * rewrite prompt and at least success_fraction of all rewrite prompts produce the new answer,
     * and loss - weight_decay * ||delta|| / ||v_init||^2 &lt;= success_nll.
     */
    public boolean holds(float[] x) throws Exception {
        fill(x, 0, 1);
        if (sameRow(x, baseZ)) {  // the last step's row 0: its program call scored it
            checkedLoss = baseLoss;
            checkedCorrect = baseCorrect;
        } else if (!sameRow(x, checkedZ)) {  // (the point the last check scored keeps its scores)
            run();
            evals += 1;
            checkedLoss = losses[0];
            checkedCorrect = java.util.Arrays.copyOf(correct, nRewrite);
        }
        checkedZ = java.util.Arrays.copyOf(x, d);
        double decay = SuccessCriterion.decay(weightDecay, deltas, 0, d, vInit);
        return success.holds(checkedCorrect, 0, nRewrite, targetLen, checkedLoss, decay);
    }

    /** The thresholds this objective checks. */
    public SuccessCriterion success() {
        return success;
    }

    /** Loss evaluations made (rows that carried a real delta). */
    public long evals() {
        return evals;
    }

    /** Written-edit checks made by {@link #passes} (not loss evaluations). */
    public long writtenChecks() {
        return writtenChecks;
    }

    /** Of {@link #writtenChecks}, those whose written edit did not hold (the loop went on). */
    public long writtenRefused() {
        return writtenRefused;
    }

    /** Edit-program calls made. */
    public long calls() {
        return calls;
    }

    /** Whether row 0 of {@code z} is {@code row}, bit for bit (false for a null row). */
    private boolean sameRow(float[] z, float[] row) {
        if (row == null) {
            return false;
        }
        for (int i = 0; i < d; i++) {
            if (Float.floatToRawIntBits(z[i]) != Float.floatToRawIntBits(row[i])) {
                return false;
            }
        }
        return true;
    }

    private void fill(float[] z, int firstRow, int n) {
        java.util.Arrays.fill(deltas, 0f);
        for (int i = 0; i < n * d; i++) {
            deltas[i] = z[firstRow * d + i] * scale;
        }
    }

    private void run() throws Exception {
        if (cancel != null && cancel.get()) {
            throw new Cancelled();
        }
        programs.edit(state, deltas, losses, correct);
        calls++;
    }
}
