package dev.mobiedit.demo.app;

import dev.mobiedit.demo.core.EditRequest;
import dev.mobiedit.demo.jni.EngineConfig;
import dev.mobiedit.demo.jni.EngineStatus;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/** One finished search: the rank-one factors and what it cost (journal metrics / config). */
public final class EditOutcome {
    public final EditRequest request;
    public final EngineStatus status;
    public final boolean succeeded;
    public final long steps;
    public final long evals;
    public final double[] history;
    /** The value delta (unnormalised) [d_out]. */
    public final float[] delta;
    public final float[] u;
    public final float[] w;
    public final long wallMillis;
    public final EngineConfig config;
    /** The success check's thresholds used. */
    public final SuccessCriterion success;

    EditOutcome(EditRequest request, EngineStatus status, boolean succeeded, long steps,
            long evals, double[] history, float[] delta, float[] u, float[] w, long wallMillis,
            EngineConfig config, SuccessCriterion success) {
        this.request = request;
        this.status = status;
        this.succeeded = succeeded;
        this.steps = steps;
        this.evals = evals;
        this.history = history;
        this.delta = delta;
        this.u = u;
        this.w = w;
        this.wallMillis = wallMillis;
        this.config = config;
        this.success = success;
    }

    /** The journal's "metrics" (same keys as the Python EditOutcome where they apply). */
    public Map<String, Object> metrics() {
        Map<String, Object> m = new LinkedHashMap<String, Object>();
        m.put("succeeded", succeeded);
        m.put("status", status.name());
        m.put("loss_evals", evals);
        m.put("steps", steps);
        m.put("backward_calls", 0L);
        m.put("wall_time", wallMillis / 1000.0);
        List<Object> l = new ArrayList<Object>();
        for (double v : history) {
            if (!Double.isNaN(v) && !Double.isInfinite(v)) {
                l.add(v);
            }
        }
        m.put("losses", l);
        m.put("device", "android");
        return m;
    }

    /**
     * The journal's "config": the loop settings and the success check's thresholds used
     * ({@code success_fraction}, {@code success_nll}, as export/ops.py records them).
     */
    public Map<String, Object> configJson() {
        String[] est = {"paper", "fzoo", "antithetic"};
        String[] opt = {"sgd", "adam"};
        Map<String, Object> c = new LinkedHashMap<String, Object>();
        c.put("estimator", est[config.estimator]);
        c.put("n_dirs", (long) config.nDirs);
        c.put("h", config.h);
        c.put("optimizer", opt[config.optimizer]);
        c.put("lr", config.lr);
        c.put("max_steps", config.maxSteps);
        c.put("max_evals", config.maxEvals);
        c.put("check_every", config.checkEvery);
        c.put("seed", config.seed);
        c.put("success_fraction", success.fraction);
        c.put("success_nll", success.nll);
        c.put("backend", "native-jni");
        return c;
    }
}
