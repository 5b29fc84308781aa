package dev.mobiedit.demo.app;

import dev.mobiedit.demo.jni.NativeEngine;
import java.util.concurrent.atomic.AtomicBoolean;

/**
 * The engine's two callbacks on top of the edit program. The engine searches in normalised units
 * z (delta = z * scale, scale = ||v_init|| / sqrt(d), as mobiedit/methods/zo_edit.py); the
 * engine's K rows are fed to the program in chunks of its static batch (shapes.edit_K), the
 * last chunk zero-padded. The success check ("all_prompts") holds when every rewrite prompt's
 * target tokens are all the argmax. Setting {@code cancel} makes the next callback throw.
 */
public final class EditObjective implements NativeEngine.Forward, NativeEngine.Check {
    private final EditPrograms programs;
    private final PrefixState state;
    private final int d;
    private final float scale;
    private final int nRewrite;
    private final AtomicBoolean cancel;
    private final float[] deltas;
    private final float[] losses;
    private final float[] correct;
    private long evals;
    private long calls;

    public EditObjective(EditPrograms programs, PrefixState state, int d, float scale,
            int nRewrite, AtomicBoolean cancel) {
        this.programs = programs;
        this.state = state;
        this.d = d;
        this.scale = scale;
        this.nRewrite = nRewrite;
        this.cancel = cancel;
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
        for (int start = 0; start < rows; start += b) {
            int n = Math.min(b, rows - start);
            fill(z, start, n);
            run();
            System.arraycopy(losses, 0, lossesOut, start, n);
            evals += n;
        }
    }

    @Override
    public boolean check(float[] x, int dd) throws Exception {
        return holds(x);
    }

    /** True if delta = x * scale makes every rewrite prompt produce the new answer. */
    public boolean holds(float[] x) throws Exception {
        fill(x, 0, 1);
        run();
        evals += 1;
        for (int j = 0; j < nRewrite; j++) {
            if (!(correct[j] >= 1.0f)) {
                return false;
            }
        }
        return true;
    }

    /** Loss evaluations made (rows that carried a real delta). */
    public long evals() {
        return evals;
    }

    /** Edit-program calls made. */
    public long calls() {
        return calls;
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
