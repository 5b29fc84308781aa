package dev.mobiedit.demo.app;

import dev.mobiedit.demo.core.EditRequest;
import dev.mobiedit.demo.core.Recipe;
import dev.mobiedit.demo.jni.EngineConfig;
import dev.mobiedit.demo.jni.EngineStatus;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/**
 * One finished search: the rank-one factors, both verdicts and what it cost (journal metrics /
 * config), as export/ops.py's BundleSearch / BundleEditResult. After a climb of the clamp ladder
 * ({@link Ladder}) it is the last rung's outcome with every rung's steps, loss evaluations, losses
 * and wall time added in.
 */
public final class EditOutcome {
    public final EditRequest request;
    public final EngineStatus status;
    /**
     * The verdict that counts: the written edit's ({@link #verified}: the factors in the first
     * free slot, the prefix program rerun, the edit program at delta 0 judged by
     * {@link SuccessCriterion#saysIt}), else the loop's ({@link #loopSucceeded}).
     */
    public final boolean succeeded;
    /** The search's own verdict (its stop signal: early stop, or the success rule at the end). */
    public final boolean loopSucceeded;
    /** Whether the written verdict was taken (false: every slot was taken). */
    public final boolean verified;
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
    /** What stopped the search: the recipe's {@code success.stop_on}, "loop" or "written". */
    public final String stopOn;
    /**
     * Written-edit checks the search made where the loop's rule passed (stop_on "written"; 0
     * with "loop"), summed over a ladder's rungs; not loss evaluations.
     */
    public final long writtenChecks;
    /** Of {@link #writtenChecks}, those whose written edit did not hold (the search went on). */
    public final long writtenRefused;
    /** Rungs of the clamp ladder tried (0: none climbed, one run at the manifest's clamp). */
    public final int ladderTries;
    /** The last rung's clamp_norm_factor (fraction x the manifest's), NaN without a ladder. */
    public final double ladderClamp;
    /**
     * k̄ of the rewrite rows [d_in] (journaled with the edit: the protecting write rules hold
     * the active edits' keys still); null where not known.
     */
    public final float[] key;
    /** The settle phase the search ran ({@link Recipe.Settle#OFF}: none). */
    public final Recipe.Settle settle;
    /** Settle rounds kept (0: none kept, or no phase). */
    public final int settled;

    EditOutcome(EditRequest request, EngineStatus status, boolean succeeded,
            boolean loopSucceeded, boolean verified, long steps, long evals, double[] history,
            float[] delta, float[] u, float[] w, long wallMillis, EngineConfig config,
            SuccessCriterion success, String stopOn, long writtenChecks, long writtenRefused) {
        this(request, status, succeeded, loopSucceeded, verified, steps, evals, history, delta, u,
            w, wallMillis, config, success, stopOn, writtenChecks, writtenRefused, null);
    }

    /** The outcome of one search whose rewrite rows' mean key is {@code key} (null: not known). */
    EditOutcome(EditRequest request, EngineStatus status, boolean succeeded,
            boolean loopSucceeded, boolean verified, long steps, long evals, double[] history,
            float[] delta, float[] u, float[] w, long wallMillis, EngineConfig config,
            SuccessCriterion success, String stopOn, long writtenChecks, long writtenRefused,
            float[] key) {
        this(request, status, succeeded, loopSucceeded, verified, steps, evals, history, delta, u,
            w, wallMillis, config, success, stopOn, writtenChecks, writtenRefused, 0, Double.NaN,
            key, Recipe.Settle.OFF, 0);
    }

    /** {@link #EditOutcome(EditRequest, EngineStatus, boolean, boolean, boolean, long, long,
     * double[], float[], float[], float[], long, EngineConfig, SuccessCriterion, String, long,
     * long, float[])} of a search that ran the settle phase {@code settle}, {@code settled}
     * rounds kept. */
    EditOutcome(EditRequest request, EngineStatus status, boolean succeeded,
            boolean loopSucceeded, boolean verified, long steps, long evals, double[] history,
            float[] delta, float[] u, float[] w, long wallMillis, EngineConfig config,
            SuccessCriterion success, String stopOn, long writtenChecks, long writtenRefused,
            float[] key, Recipe.Settle settle, int settled) {
        this(request, status, succeeded, loopSucceeded, verified, steps, evals, history, delta, u,
            w, wallMillis, config, success, stopOn, writtenChecks, writtenRefused, 0, Double.NaN,
            key, settle, settled);
    }

    private EditOutcome(EditRequest request, EngineStatus status, boolean succeeded,
            boolean loopSucceeded, boolean verified, long steps, long evals, double[] history,
            float[] delta, float[] u, float[] w, long wallMillis, EngineConfig config,
            SuccessCriterion success, String stopOn, long writtenChecks, long writtenRefused,
            int ladderTries, double ladderClamp, float[] key, Recipe.Settle settle, int settled) {
        this.key = key;
        this.settle = settle;
        this.settled = settled;
        this.request = request;
        this.status = status;
        this.succeeded = succeeded;
        this.loopSucceeded = loopSucceeded;
        this.verified = verified;
        this.steps = steps;
        this.evals = evals;
        this.history = history;
        this.delta = delta;
        this.u = u;
        this.w = w;
        this.wallMillis = wallMillis;
        this.config = config;
        this.success = success;
        this.stopOn = stopOn;
        this.writtenChecks = writtenChecks;
        this.writtenRefused = writtenRefused;
        this.ladderTries = ladderTries;
        this.ladderClamp = ladderClamp;
    }

    /**
     * The outcome of a ladder climb (export/ops.py climb_bundle_edit): the last of {@code rungs}
     * (tried in order, not empty) with the steps, loss evaluations, written-edit checks and
     * refusals and wall time of all of them summed and their loss histories concatenated;
     * {@code clamp}: the last rung's
     * clamp_norm_factor.
     */
    static EditOutcome climbed(List<EditOutcome> rungs, double clamp) {
        EditOutcome last = rungs.get(rungs.size() - 1);
        long steps = 0;
        long evals = 0;
        long wall = 0;
        long checks = 0;
        long refused = 0;
        int n = 0;
        for (EditOutcome o : rungs) {
            steps += o.steps;
            evals += o.evals;
            wall += o.wallMillis;
            checks += o.writtenChecks;
            refused += o.writtenRefused;
            n += o.history.length;
        }
        double[] history = new double[n];
        int at = 0;
        for (EditOutcome o : rungs) {
            System.arraycopy(o.history, 0, history, at, o.history.length);
            at += o.history.length;
        }
        return new EditOutcome(last.request, last.status, last.succeeded, last.loopSucceeded,
            last.verified, steps, evals, history, last.delta, last.u, last.w, wall, last.config,
            last.success, last.stopOn, checks, refused, rungs.size(), clamp, last.key, last.settle,
            last.settled);
    }

    /**
     * The journal's "metrics" (same keys as the Python EditOutcome where they apply):
     * {@code succeeded} (the verdict that counts) and {@code loop_succeeded} (the search's own;
     * null when the written verdict could not be taken, as export/ops.py records it);
     * {@code written_checks} / {@code written_refused}: the search's written-edit checks and
     * their refusals (stop_on "written"; 0 with "loop").
     */
    public Map<String, Object> metrics() {
        Map<String, Object> m = new LinkedHashMap<String, Object>();
        m.put("succeeded", succeeded);
        m.put("loop_succeeded", verified ? (Object) loopSucceeded : null);
        m.put("status", status.name());
        m.put("loss_evals", evals);
        m.put("steps", steps);
        m.put("backward_calls", 0L);
        m.put("wall_time", wallMillis / 1000.0);
        m.put("written_checks", writtenChecks);
        m.put("written_refused", writtenRefused);
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
     * ({@code success_fraction}, {@code success_nll}, as export/ops.py records them) and what
     * stopped the search ({@code stop_on}, the recipe's {@code success.stop_on}); after a
     * ladder climb also {@code clamp_norm_factor} (the last rung's, absolute),
     * {@code ladder_tries} and {@code ladder_warm} (false: every rung starts from delta 0), the
     * keys of export/ops.py climb_bundle_edit.
     */
    public Map<String, Object> configJson() {
        String[] est = {"paper", "fzoo", "antithetic"};
        String[] opt = {"sgd", "adam"};
        Map<String, Object> zo = new LinkedHashMap<String, Object>();
        zo.put("estimator", est[config.estimator]);
        zo.put("n_dirs", (long) config.nDirs);
        zo.put("h", config.h);
        zo.put("optimizer", opt[config.optimizer]);
        zo.put("lr", config.lr);
        zo.put("max_steps", config.maxSteps);
        zo.put("max_evals", config.maxEvals);
        zo.put("check_every", config.checkEvery);
        zo.put("seed", config.seed);
        zo.put("directions", Recipe.DIRECTIONS[config.directions]);
        zo.put("normalise", Recipe.NORMALISE[config.normalise]);
        zo.put("check_at", Recipe.CHECK_AT[config.checkAt]);
        Map<String, Object> c = new LinkedHashMap<String, Object>();
        c.put("zo", zo);  // nested as mobiedit.export.ops writes it (one journal schema for both hosts)
        c.put("success_fraction", success.fraction);
        c.put("success_nll", success.nll);
        c.put("stop_on", stopOn);
        if (settle.rounds > 0) {  // as mobiedit.recipes.search_record
            Map<String, Object> st = new LinkedHashMap<String, Object>();
            st.put("rounds", (long) settle.rounds);
            st.put("shrink", settle.shrink);
            st.put("steps", settle.steps);
            c.put("settle", st);
        }
        c.put("backend", "native-jni");
        if (ladderTries > 0) {
            c.put("clamp_norm_factor", ladderClamp);
            c.put("ladder_tries", (long) ladderTries);
            c.put("ladder_warm", false);
        }
        return c;
    }
}
