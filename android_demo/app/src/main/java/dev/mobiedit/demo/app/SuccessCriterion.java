package dev.mobiedit.demo.app;

import dev.mobiedit.demo.core.MobiEditError;
import dev.mobiedit.demo.core.Recipe;

/**
 * When an edit counts as succeeded: the early stop of the search ({@code SUCCESS_CHECK}, the
 * loop's verdict) and, without its margin ({@link #saysIt}), the written edit's verdict (the
 * outcome's "succeeded", {@link EditRunner}). The toolchain's rule, defined once in Python as
 * {@code mobiedit.editing.objective.edit_holds} plus a loss margin and applied identically by
 * {@code mobiedit/methods/mobiedit.py} ({@code mobiedit_edit}'s {@code check}) and
 * {@code export/ops.py} ({@code _edit_one}'s {@code check}). For delta = x * scale it holds when
 * <ol>
 *   <li>row 0 (the plain rewrite prompt) is fully correct: the edit program's
 *       {@code correct[0] == target_len} (every target token is the teacher-forced argmax);</li>
 *   <li>the share of fully-correct rows among all n_rewrite rewrite rows (row 0 plus the
 *       context-templated ones) is at least {@link #fraction};</li>
 *   <li>loss(x) - decay(x) &lt;= {@link #nll}, where loss(x) is
 *       the edit program's loss at delta and decay(x) = edit.objective.weight_decay * ||delta|| /
 *       ||v_init||^2 (v_init = the prefix program's values[0]): the objective without its decay
 *       term, i.e. the mean target NLL per token plus the KL term, is at most this margin.</li>
 * </ol>
 * Conditions 1 and 2 alone are {@link #saysIt} (Python's {@code edit_holds(full_rows(...),
 * fraction)}): the rule the written edit is judged by (verify after write, issue 18: the factors
 * in a free slot, the programs rerun at delta 0), without the loss margin, which only serves
 * the search as its stop signal. {@link #holds} is {@link #saysIt} plus condition 3.
 * The two thresholds come from the bundle's manifest ({@code recipe.success}, {@link #of}; the
 * shipped 0.75 / 0.5 for manifests without a recipe); {@link EditRunner#setSuccess} overrides
 * them. They are recorded in the journal's "config" as {@code success_fraction} /
 * {@code success_nll}, as the Python bundle path records them.
 */
public final class SuccessCriterion {

    /** Minimum share of fully-correct rewrite rows, in [0, 1]. */
    public final double fraction;
    /** Maximum loss minus decay term, &gt; 0. */
    public final double nll;

    /** Validated as Python validates {@code success_fraction} / {@code success_nll}. */
    public SuccessCriterion(double fraction, double nll) {
        if (!(fraction >= 0.0 && fraction <= 1.0)) {
            throw new MobiEditError("success_fraction=" + fraction + " out of [0, 1]",
                "success_fraction", "e.g. 0.75 (plain prompt and 3/4 of the rewrite prompts)");
        }
        if (!(nll > 0)) {
            throw new MobiEditError("success_nll=" + nll + " must be > 0", "success_nll",
                "e.g. 0.5");
        }
        this.fraction = fraction;
        this.nll = nll;
    }

    /** The rule of a bundle's recipe ({@code recipe.success}: fraction, nll). */
    public static SuccessCriterion of(Recipe recipe) {
        return new SuccessCriterion(recipe.successFraction, recipe.successNll);
    }

    /**
     * The shipped rule (success_fraction 0.75, success_nll 0.5: MobiEditConfig's), for callers
     * without a manifest recipe ({@link Recipe#FALLBACK_SUCCESS_FRACTION} / NLL).
     */
    public static SuccessCriterion shippedFallback() {
        return new SuccessCriterion(Recipe.FALLBACK_SUCCESS_FRACTION, Recipe.FALLBACK_SUCCESS_NLL);
    }

    /**
     * The rule for one delta. {@code correct[offset .. offset + nRewrite)}: the edit program's
     * per-row argmax counts of that delta (exact integers; row 0 first); {@code loss}: its loss;
     * {@code decay}: its decay term ({@link #decay}).
     */
    public boolean holds(float[] correct, int offset, int nRewrite, int targetLen, double loss,
            double decay) {
        return saysIt(correct, offset, nRewrite, targetLen) && loss - decay <= nll;
    }

    /**
     * The rule without the loss margin (mobiedit.editing.objective {@code edit_holds(full_rows(
     * correct[:n_rewrite], target_len), fraction)}): row 0, the plain rewrite prompt, fully
     * correct ({@code correct[offset] == targetLen}) and at least {@link #fraction} of the
     * {@code nRewrite} rewrite rows {@code correct[offset .. offset + nRewrite)} fully correct.
     */
    public boolean saysIt(float[] correct, int offset, int nRewrite, int targetLen) {
        if (nRewrite < 1 || correct[offset] != targetLen) {
            return false;
        }
        int full = 0;
        for (int j = 0; j < nRewrite; j++) {
            if (correct[offset + j] == targetLen) {
                full++;
            }
        }
        // an exact count, as edit_holds: full >= fraction * nRewrite (1e-9 tolerance)
        return full >= fraction * nRewrite - 1e-9;
    }

    /**
     * decay = weightDecay * ||delta|| / ||v_init||^2 for delta = {@code delta[offset .. offset +
     * d)} (norms as float32 results, as the Python checks' {@code float(t.norm())}).
     */
    public static double decay(double weightDecay, float[] delta, int offset, int d,
            float[] vInit) {
        double dn = (float) norm(delta, offset, d);
        double vn = (float) norm(vInit, 0, vInit.length);
        return weightDecay * dn / (vn * vn);
    }

    /** ||a[offset .. offset + n)||, summed in double. */
    static double norm(float[] a, int offset, int n) {
        double ss = 0;
        for (int i = 0; i < n; i++) {
            double v = a[offset + i];
            ss += v * v;
        }
        return Math.sqrt(ss);
    }

    @Override
    public String toString() {
        return "success_fraction=" + fraction + ", success_nll=" + nll;
    }
}
