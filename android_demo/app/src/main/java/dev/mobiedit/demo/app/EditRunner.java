package dev.mobiedit.demo.app;

import dev.mobiedit.demo.core.ByteLevelBpe;
import dev.mobiedit.demo.core.EditBatch;
import dev.mobiedit.demo.core.EditBatchBuilder;
import dev.mobiedit.demo.core.EditPack;
import dev.mobiedit.demo.core.EditRequest;
import dev.mobiedit.demo.core.Manifest;
import dev.mobiedit.demo.core.MobiEditError;
import dev.mobiedit.demo.core.Recipe;
import dev.mobiedit.demo.jni.EngineConfig;
import dev.mobiedit.demo.jni.EngineStatus;
import dev.mobiedit.demo.jni.NativeEngine;
import dev.mobiedit.demo.jni.NativeEngineException;
import java.util.List;
import java.util.concurrent.atomic.AtomicBoolean;

/**
 * One forward-only search, end to end (mobiedit.export.ops.search_bundle_edit on the phone): batch
 * (the manifest's context templates and KL prompt) → packed to the programs' shapes → prefix
 * program → native ZO loop whose forwards run the edit program → rank-one factors
 * u = delta, w = C^-1 k̄ / (k_cur · C^-1 k̄) → verify after write (issue 18): the factors in
 * the first free slot, the prefix program rerun, the edit program at delta 0 judged by
 * {@link SuccessCriterion#saysIt}; that verdict is the outcome's {@code succeeded}, the loop's
 * its {@code loopSucceeded}. With the recipe's {@code success.stop_on} "written" that check is
 * also the search's stop (mobiedit/driver.py search_value's {@code confirm}): where the loop's
 * rule passes, the written edit of that delta must not fail, else the loop goes on
 * ({@link WriteCheck}; counted in the outcome's writtenChecks / writtenRefused); with "loop" the
 * loop's rule alone stops it. With the recipe's {@code settle} (rounds &gt; 0) a passing search
 * runs the settle phase ({@link Recipe.Settle}) before its factors are computed. Runs on a worker thread; progress and the before-answer go to the
 * {@link Listener}. Nothing is recorded here (see BundleSession.apply); the clamp ladder, several
 * such searches, is {@link Ladder}'s.
 */
public final class EditRunner {

    /** Progress of a run (called on the worker thread). */
    public interface Listener {
        /** The batch and prefix state are ready; {@code beforeAnswer}: the unedited answer. */
        void prepared(String beforeAnswer);

        /** One loop step done: steps of this search, its loss, loss evaluations so far. */
        void progress(long step, double loss, long evals);

        /**
         * A rung of the clamp ladder starts ({@link Ladder}; not called without one): rung
         * {@code index} (1-based) of {@code count}, its {@code fraction} of the manifest's clamp,
         * i.e. clamp_norm_factor {@code clampNormFactor}.
         */
        void rung(int index, int count, double fraction, double clampNormFactor);
    }

    /** Answers a prompt with the current model (before-answer); may return "". */
    public interface Answerer {
        String answer(String prompt) throws Exception;
    }

    private final ByteLevelBpe tok;
    private final Manifest manifest;
    private final EditPrograms programs;
    private final KeyStats keys;
    /** The active edits' keys the protecting write rules hold still ({@link #setProtectedKeys}). */
    private float[][] protectedKeys;
    /** The last prefix state's update direction ({@link #direction}; read-only once computed). */
    private PrefixState directionOf;
    private float[] direction;
    private EngineConfig config;
    private SuccessCriterion success;

    public EditRunner(ByteLevelBpe tok, Manifest manifest, EditPrograms programs, KeyStats keys) {
        this.tok = tok;
        this.manifest = manifest;
        this.programs = programs;
        this.keys = keys;
    }

    /** Override the loop settings (null, the default: the manifest's recipe, {@link #forBundle}). */
    public void setConfig(EngineConfig c) {
        config = c;
    }

    /**
     * Override the success check's thresholds (null, the default: the manifest's
     * {@code recipe.success}, {@link SuccessCriterion#of}, as edit_bundle). They decide the early
     * stop and the loop's verdict ({@link SuccessCriterion#holds}); the fraction alone also the
     * written edit's ({@link SuccessCriterion#saysIt}), the outcome's succeeded.
     */
    public void setSuccess(SuccessCriterion s) {
        success = s;
    }

    /** The success rule a run uses: the override, else the manifest recipe's. */
    public SuccessCriterion success() {
        return success != null ? success : SuccessCriterion.of(manifest.recipe);
    }

    /**
     * Search the edit for {@code req} with the active edits {@code slots} ({slot_u, slot_w}, the
     * journal's, {@link dev.mobiedit.demo.core.Journal#slotFactors}) and verify it after write.
     * Returns null if {@code cancel} was set during the search; a NONFINITE or ERROR stop throws
     * MobiEditError with the engine's message; a subject at the prompt's first token is refused
     * before any program runs ({@link EditBatchBuilder#checkSubjectContext}).
     */
    public EditOutcome run(EditRequest req, List<String> templates, float[][] slots,
            Answerer answerer, Listener listener, AtomicBoolean cancel) throws Exception {
        long t0 = System.currentTimeMillis();
        int d = manifest.dOut();
        Manifest.Objective objective = manifest.edit.objective;
        EditBatchBuilder.checkSubjectContext(tok, req);
        EditBatch batch = batchOf(req, templates);
        EditPack pack = EditPack.pack(batch, manifest.shapes, objective);
        PrefixState st = programs.prefix(pack, slots[0], slots[1]);
        checkLengths(st, d, manifest.dIn());
        String before = answerer == null ? "" : answerer.answer(req.rewritePrompt());
        if (listener != null) {
            listener.prepared(before);
        }
        float scale = EditObjective.scaleOf(st.vInit);
        if (!(scale > 0)) {
            throw new MobiEditError("||v_init|| is 0 or not finite", "prefix program output",
                "re-export the bundle (the prefix program returned a zero value vector)");
        }
        SuccessCriterion rule = success();
        String stopOn = manifest.recipe.stopOn;
        WriteCheck check = Recipe.STOP_WRITTEN.equals(stopOn)
            ? new WriteCheck(this, pack, slots, st, rule) : null;
        EditObjective obj = new EditObjective(programs, st, d, scale, batch.nRewrite,
            batch.targetLen, objective.weightDecay, rule, cancel, check);
        EngineConfig cfg = config != null ? config : forBundle(manifest, d);
        NativeEngine engine = new NativeEngine();
        try {
            engine.configure(cfg, d);
            EngineStatus status = loop(engine, obj, listener, cancel);
            if (status == null) {
                return null;
            }
            if (status == EngineStatus.NONFINITE) {
                throw new MobiEditError("the search produced NaN/Inf (" + engine.message() + ")",
                    "edit loop", "retry; if it repeats, re-export the bundle in fp32");
            }
            float[] z = engine.x();
            boolean loopOk = status.isSuccess() || obj.passes(z);
            Recipe.Settle settle = manifest.recipe.settle;
            long steps = engine.steps();
            double[] history = engine.history();
            int settled = 0;
            if (loopOk && settle.rounds > 0) {
                SettlePhase s = SettlePhase.run(cfg, d, z, settle, obj, listener, cancel);
                if (s == null) {
                    return null;
                }
                z = s.z;
                settled = s.rounds;
                steps += s.steps;
                history = SettlePhase.concat(history, s.history);
            }
            float[] delta = new float[d];
            for (int i = 0; i < d; i++) {
                delta[i] = z[i] * scale;
            }
            boolean reuse = check != null && check.at(delta);  // stopped where it was checked
            float[][] f = reuse ? check.factors() : factors(st, delta);
            Boolean written = reuse ? check.verdict() : writtenHolds(pack, slots, f[0], f[1], rule);
            boolean ok = written != null ? written : loopOk;
            return new EditOutcome(req, status, ok, loopOk, written != null, steps,
                obj.evals(), history, delta, f[0], f[1], System.currentTimeMillis() - t0,
                cfg, rule, stopOn, obj.writtenChecks(), obj.writtenRefused(), st.kBar, settle,
                settled);
        } finally {
            engine.close();
        }
    }

    /**
     * The search of this bundle, as mobiedit.export.ops does it: the manifest's recipe (as
     * exported: FZOO with edit_K - 1 directions, one program call per step; the shipped fallback
     * for manifests without one) with ||z|| clamped to edit.objective.clamp_norm_factor * sqrt(d).
     */
    public static EngineConfig forBundle(Manifest m, int d) {
        return forBundle(m, d, m.edit.objective.clampNormFactor);
    }

    /**
     * {@link #forBundle(Manifest, int)} with ||z|| clamped to {@code clampNormFactor * sqrt(d)}
     * instead (a rung of the clamp ladder, {@link Ladder}).
     */
    public static EngineConfig forBundle(Manifest m, int d, double clampNormFactor) {
        return EngineConfig.fromRecipe(m.recipe, clampNormFactor * Math.sqrt(d));
    }

    /**
     * Verify after write (export/verify.py {@code written_holds}): {@code u}, {@code w} in the
     * first free slot of {@code slots} (a slot whose u row is all zero), then
     * {@link #saysAtZero} with those slots. Null when every slot is taken (the edit cannot be
     * written anyway). Not a loss evaluation.
     */
    Boolean writtenHolds(EditPack pack, float[][] slots, float[] u, float[] w,
            SuccessCriterion rule) throws Exception {
        int dOut = u.length;
        int dIn = w.length;
        int n = slots[0].length / dOut;
        int free = -1;
        for (int s = 0; s < n && free < 0; s++) {
            boolean zero = true;
            for (int i = 0; i < dOut && zero; i++) {
                zero = slots[0][s * dOut + i] == 0f;
            }
            free = zero ? s : -1;
        }
        if (free < 0) {
            return null;
        }
        float[] su = slots[0].clone();
        float[] sw = slots[1].clone();
        System.arraycopy(u, 0, su, free * dOut, dOut);
        System.arraycopy(w, 0, sw, free * dIn, dIn);
        return saysAtZero(pack, su, sw, rule);
    }

    /**
     * Whether the bundle with {@code slots} ({slot_u, slot_w}) in its rank-one slots says
     * {@code req}'s new fact (export/verify.py {@code says_now}): its batch built with
     * {@code templates} and the manifest's objective, packed, then {@link #saysAtZero} with the
     * rule of {@link #success()} ({@link SuccessCriterion#saysIt}: its fraction, no loss margin).
     * The same check as the write check, on a recorded edit: what BundleSession's repair
     * rechecks. Two program calls, no search.
     */
    public boolean saysNow(EditRequest req, List<String> templates, float[][] slots)
            throws Exception {
        EditPack pack = EditPack.pack(batchOf(req, templates), manifest.shapes,
            manifest.edit.objective);
        return saysAtZero(pack, slots[0], slots[1], success());
    }

    /**
     * export/verify.py {@code holds_at_zero}: the prefix program run with slots {@code su},
     * {@code sw}, the edit program at delta 0, its row 0 judged by {@code rule.saysIt}.
     */
    boolean saysAtZero(EditPack pack, float[] su, float[] sw, SuccessCriterion rule)
            throws Exception {
        int dOut = manifest.dOut();
        PrefixState st = programs.prefix(pack, su, sw);
        checkLengths(st, dOut, manifest.dIn());
        int rows = programs.batchRows();
        float[] losses = new float[rows];
        float[] correct = new float[rows * pack.nRewrite];
        programs.edit(st, new float[rows * dOut], losses, correct);
        return rule.saysIt(correct, 0, pack.nRewrite, pack.targetLen);
    }

    /** ROME's batch of {@code req}: {@code templates} and the manifest's KL prompt. */
    private EditBatch batchOf(EditRequest req, List<String> templates) {
        return EditBatchBuilder.build(tok, req, templates, manifest.edit.objective.klPrompt,
            manifest.padId());
    }

    /** Step until done; null when cancelled. */
    static EngineStatus loop(NativeEngine engine, EditObjective obj, Listener listener,
            AtomicBoolean cancel) {
        EngineStatus status = EngineStatus.RUNNING;
        while (!status.isDone()) {
            if (cancel != null && cancel.get()) {
                return null;
            }
            try {
                status = engine.step(obj, obj);
            } catch (NativeEngineException e) {
                if (e.getCause() instanceof Cancelled) {
                    return null;
                }
                throw e;
            }
            double[] h = engine.history();
            if (listener != null && h.length > 0) {
                listener.progress(engine.steps(), h[h.length - 1], obj.evals());
            }
        }
        return status;
    }

    /**
     * The active edits' keys [n][d_in] (JournalKeys.active) that a "protect" / "rows-protect"
     * write rule holds still; the search computes the direction once per prefix state.
     */
    public void setProtectedKeys(float[][] prior) {
        protectedKeys = prior;
        directionOf = null;
    }

    /**
     * ROME factors for v* = out_cur + delta at k_cur (native rank_one), in the direction of the
     * manifest's write rule: C^-1 k̄, or with "rows" the direction exact at every rewrite row's key.
     */
    float[][] factors(PrefixState st, float[] delta) {
        int d = delta.length;
        float[] vStar = new float[d];
        for (int i = 0; i < d; i++) {
            vStar[i] = st.outCur[i] + delta[i];
        }
        float[] c = direction(st);
        float[] u = new float[d];
        float[] w = new float[st.kCur.length];
        NativeEngine.rankOne(st.kCur, vStar, st.outCur, c, u, w);
        return new float[][] {u, w};
    }

    /**
     * The update direction of the manifest's write rule for {@code st}: it does not depend on the
     * delta, so it is computed once per prefix state (every written check and the final factors
     * of one search reuse it, as mobiedit.export.ops computes it once per search).
     */
    private float[] direction(PrefixState st) {
        if (st == directionOf) {
            return direction;
        }
        float[] c;
        String ruleName = manifest.edit.updateRule;
        float[][] prior = manifest.edit.protects() ? protectedKeys : null;
        if (prior == null && manifest.edit.protects()) {
            throw new MobiEditError("no applied edits' keys were given", "edit.update.rule " + ruleName,
                "call EditRunner.setProtectedKeys(JournalKeys.active(journal)) before the search");
        }
        if (Manifest.EditSetup.RULE_ROWS.equals(ruleName)
                || Manifest.EditSetup.RULE_ROWS_PROTECT.equals(ruleName)) {
            if (st.rewriteKeys == null) {
                throw new MobiEditError("the prefix state has no rewrite-row keys", "edit.update.rule " + ruleName,
                    "build the state with PrefixState.fromKeysValues");
            }
            c = keys.rowsDirection(st.rewriteKeys, st.nRewrite, manifest.edit.rowsRidge, prior,
                manifest.edit.editedWeight);
        } else if (Manifest.EditSetup.RULE_PROTECT.equals(ruleName)) {
            c = keys.protectDirection(st.kBar, prior, manifest.edit.editedWeight);
        } else {
            c = keys.solve(st.kBar);
        }
        directionOf = st;
        direction = c;
        return c;
    }

    private static void checkLengths(PrefixState st, int dOut, int dIn) {
        Object[][] want = {{"k_bar", st.kBar, dIn}, {"k_cur", st.kCur, dIn},
            {"out_cur", st.outCur, dOut}, {"v_init", st.vInit, dOut}};
        for (Object[] w : want) {
            float[] a = (float[]) w[1];
            if (a == null || a.length != (Integer) w[2]) {
                throw new MobiEditError("output '" + w[0] + "' has length "
                    + (a == null ? "none" : a.length) + ", expected " + w[2],
                    "prefix program", "re-export the bundle with this app's version of mobiedit");
            }
        }
    }
}
