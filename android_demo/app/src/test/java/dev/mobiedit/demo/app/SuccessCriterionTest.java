package dev.mobiedit.demo.app;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.mobiedit.demo.core.EditPack;
import dev.mobiedit.demo.core.MobiEditError;
import dev.mobiedit.demo.core.Recipe;
import org.junit.jupiter.api.Test;

/**
 * The success rule (mobiedit.editing.objective.edit_holds + the loss margin, as mobiedit_method.py and
 * export/ops.py check it): row 0 fully correct AND share of fully-correct rows >= success_fraction
 * AND loss - weight_decay * ||delta|| / ||v_init||^2 <= success_nll. Each case drops exactly one
 * condition, through {@link EditObjective#holds} (the engine's check callback) with a scripted
 * edit program of 10 rewrite rows.
 */
class SuccessCriterionTest {
    static final int D = 4;
    static final int N_REWRITE = 10;
    static final int TARGET_LEN = 3;
    static final double WEIGHT_DECAY = 0.5;

    /** Row j of the check's delta gets correct[j]; every row's loss is {@link #loss}. */
    static final class Scripted implements EditPrograms {
        final boolean[] full = new boolean[N_REWRITE];
        double loss;
        final int rows;

        Scripted(int rows) {
            this.rows = rows;
        }

        @Override
        public PrefixState prefix(EditPack pack, float[] u, float[] w) {
            throw new UnsupportedOperationException();
        }

        @Override
        public void edit(PrefixState st, float[] deltas, float[] losses, float[] correct) {
            for (int r = 0; r < rows; r++) {
                losses[r] = (float) loss;
                for (int j = 0; j < N_REWRITE; j++) {
                    correct[r * N_REWRITE + j] = full[j] ? TARGET_LEN : TARGET_LEN - 1;
                }
            }
        }

        @Override
        public int batchRows() {
            return rows;
        }
    }

    /** v_init = (2, 0, 0, 0): ||v_init||^2 = 4, scale = 1. */
    static PrefixState state() {
        float[] v = {2f, 0f, 0f, 0f};
        return new PrefixState("s", new float[2], new float[2], v.clone(), v);
    }

    /** x = (0, 3, 4, 0): ||delta|| = 5, decay = 0.5 * 5 / 4 = 0.625. */
    static final float[] X = {0f, 3f, 4f, 0f};
    static final double DECAY = 0.625;

    static boolean holds(Scripted p, SuccessCriterion s) throws Exception {
        EditObjective o = new EditObjective(p, state(), D, 1f, N_REWRITE, TARGET_LEN, WEIGHT_DECAY,
            s, null);
        return o.holds(X);
    }

    /** Rows 0 .. n-1 fully correct (or the given ones), loss - decay = {@code margin}. */
    static Scripted rows(int nFull, double margin) {
        Scripted p = new Scripted(3);
        for (int j = 0; j < nFull; j++) {
            p.full[j] = true;
        }
        p.loss = margin + DECAY;
        return p;
    }

    @Test
    void defaultsAreThoseOfThePythonSide() {
        SuccessCriterion s = SuccessCriterion.shippedFallback();
        assertEquals(0.75, Recipe.FALLBACK_SUCCESS_FRACTION);
        assertEquals(0.5, Recipe.FALLBACK_SUCCESS_NLL);
        assertEquals(0.75, s.fraction);
        assertEquals(0.5, s.nll);
    }

    @Test
    void allThreeConditionsHoldingIsASuccess() throws Exception {
        assertTrue(holds(rows(10, 0.3), null));
        assertTrue(holds(rows(8, 0.5), null));  // 80% rows, margin exactly 0.5
    }

    @Test
    void plainPromptWrongIsNotASuccessEvenWithNinetyPercent() throws Exception {
        Scripted p = rows(10, 0.1);
        p.full[0] = false;  // 9/10 = 90% >= 0.75, margin fine
        assertFalse(holds(p, null));
        p.full[0] = true;
        p.full[9] = false;
        assertTrue(holds(p, null));  // the same 90% with row 0 right
    }

    @Test
    void seventyPercentOfRowsIsNotASuccess() throws Exception {
        assertFalse(holds(rows(7, 0.1), null));  // row 0 right, 70% < 75%
        assertTrue(holds(rows(7, 0.1), new SuccessCriterion(0.6, 0.5)));
        // as edit_holds: an exact count, so 7 of 10 rows reach a fraction of exactly 0.7
        assertTrue(holds(rows(7, 0.1), new SuccessCriterion(0.7, 0.5)));
        assertFalse(holds(rows(6, 0.1), new SuccessCriterion(0.7, 0.5)));
        assertTrue(holds(rows(1, 0.1), new SuccessCriterion(0.0, 0.5)));
    }

    @Test
    void theShareCountsEveryRewriteRowNotOnlyAPrefix() throws Exception {
        Scripted p = rows(0, 0.1);
        int[] right = {0, 2, 3, 5, 6, 7, 8, 9};  // 8/10, not contiguous
        for (int j : right) {
            p.full[j] = true;
        }
        assertTrue(holds(p, null));
        p.full[9] = false;
        p.full[8] = false;  // 6/10
        assertFalse(holds(p, null));
    }

    @Test
    void aViolatedLossMarginIsNotASuccess() throws Exception {
        assertFalse(holds(rows(10, 0.51), null));  // every row right, loss - decay = 0.51 > 0.5
        assertTrue(holds(rows(10, 0.51), new SuccessCriterion(0.75, 0.6)));
    }

    @Test
    void theMarginLeavesTheDecayTermOut() throws Exception {
        // loss 1.0 > 0.5, but loss - 0.625 = 0.375 <= 0.5
        Scripted p = rows(10, 0);
        p.loss = 1.0;
        assertTrue(holds(p, null));
        assertEquals(DECAY, SuccessCriterion.decay(WEIGHT_DECAY, X, 0, D, state().vInit), 1e-9);
        // decay uses ||delta|| = ||x * scale||: scale 2 doubles it (1.25), 1.0 - 1.25 <= 0.5
        EditObjective o = new EditObjective(p, state(), D, 2f, N_REWRITE, TARGET_LEN, WEIGHT_DECAY,
            null, null);
        p.loss = 1.7;
        assertTrue(o.holds(X));
        p.loss = 1.76;  // a fresh objective: one scores each point once (a later check of X reads the first)
        assertTrue(o.holds(X));
        assertFalse(new EditObjective(p, state(), D, 2f, N_REWRITE, TARGET_LEN, WEIGHT_DECAY, null, null).holds(X));
    }

    @Test
    void pureRuleOnAnOffsetRow() {
        SuccessCriterion s = SuccessCriterion.shippedFallback();
        float[] c = {0, 0, 0, 3, 3, 3, 2};  // row of interest at offset 3: 3 of 4 full, row 0 full
        assertTrue(s.holds(c, 3, 4, 3, 0.5, 0.0));
        assertFalse(s.holds(c, 3, 4, 3, 0.5 + 1e-6, 0.0));
        c[3] = 2;
        assertFalse(s.holds(c, 3, 4, 3, 0.0, 0.0));
    }

    @Test
    void thresholdsAreValidatedAsInPython() {
        assertThrows(MobiEditError.class, () -> new SuccessCriterion(1.5, 0.5));
        assertThrows(MobiEditError.class, () -> new SuccessCriterion(-0.1, 0.5));
        assertThrows(MobiEditError.class, () -> new SuccessCriterion(Double.NaN, 0.5));
        assertThrows(MobiEditError.class, () -> new SuccessCriterion(0.75, 0.0));
        assertThrows(MobiEditError.class, () -> new SuccessCriterion(0.75, Double.NaN));
    }
}
