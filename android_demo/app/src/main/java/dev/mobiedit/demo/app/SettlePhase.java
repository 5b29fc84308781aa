package dev.mobiedit.demo.app;

import dev.mobiedit.demo.core.MobiEditError;
import dev.mobiedit.demo.core.Recipe;
import dev.mobiedit.demo.jni.EngineConfig;
import dev.mobiedit.demo.jni.EngineStatus;
import dev.mobiedit.demo.jni.NativeEngine;
import java.util.Arrays;
import java.util.concurrent.atomic.AtomicBoolean;

/**
 * The search's settle phase on the phone ({@link Recipe.Settle}; mobiedit/driver.py
 * settle_value, the one definition the eager and bundle paths run): what {@link EditRunner} ran
 * after its first success — the kept delta (normalised units), the rounds kept, their steps and
 * base losses.
 */
final class SettlePhase {
    /** The kept delta, normalised units (the engine's x). */
    float[] z;
    /** Rounds kept. */
    int rounds;
    /** Steps of every round run, kept or not. */
    long steps;
    /** Base losses of every round run, in order. */
    double[] history = new double[0];

    private SettlePhase() {
    }

    /**
     * The settle phase (mobiedit/driver.py settle_value) from the passing delta {@code z}
     * (normalised units): round r runs the loop of {@code cfg} with at most {@code settle.steps}
     * steps and seed + r + 1 from {@code settle.shrink * z}, under the same objective and check;
     * its delta is kept if the loop stopped on success and it is shorter than the kept one, else
     * the phase ends. Null when cancelled.
     */
    static SettlePhase run(EngineConfig cfg, int d, float[] z, Recipe.Settle settle,
            EditObjective obj, EditRunner.Listener listener, AtomicBoolean cancel) {
        SettlePhase out = new SettlePhase();
        out.z = z;
        for (int r = 0; r < settle.rounds; r++) {
            float[] x0 = new float[d];
            for (int i = 0; i < d; i++) {
                x0[i] = out.z[i] * (float) settle.shrink;  // float32, as the driver's numpy
            }
            NativeEngine engine = new NativeEngine();
            try {
                engine.configure(cfg.withBudget(settle.steps, cfg.seed + r + 1), d);
                engine.reset(x0);
                EngineStatus status = EditRunner.loop(engine, obj, listener, cancel);
                if (status == null) {
                    return null;
                }
                if (status == EngineStatus.NONFINITE) {
                    throw new MobiEditError("the settle phase produced NaN/Inf (" + engine.message()
                        + ")", "edit loop", "retry; if it repeats, re-export the bundle in fp32");
                }
                out.steps += engine.steps();
                out.history = concat(out.history, engine.history());
                float[] found = engine.x();
                boolean shorter = SuccessCriterion.norm(found, 0, d)
                    < SuccessCriterion.norm(out.z, 0, d);
                if (!status.isSuccess() || !shorter) {
                    return out;
                }
                out.z = found;
                out.rounds = r + 1;
            } finally {
                engine.close();
            }
        }
        return out;
    }

    static double[] concat(double[] a, double[] b) {
        double[] out = Arrays.copyOf(a, a.length + b.length);
        System.arraycopy(b, 0, out, a.length, b.length);
        return out;
    }
}
