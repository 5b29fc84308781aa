package dev.mobiedit.demo.app;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.mobiedit.demo.core.Fixtures;
import dev.mobiedit.demo.jni.EngineStatus;
import dev.mobiedit.demo.jni.Jni;
import java.util.Arrays;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;

/**
 * Verify after write (issue 18, export/verify.py written_holds): the searched factors go into the
 * first free slot, the prefix program reruns, the edit program runs at delta 0, and the plain
 * "says it" rule (no loss margin) gives the verdict that counts; the search's own is
 * loop_succeeded. With every slot taken the loop's verdict stands (loop_succeeded null).
 */
class VerifyAfterWriteTest {
    static final int D = Fixtures.D_OUT;
    static final int D_IN = Fixtures.D_IN;

    @BeforeAll
    static void lib() {
        Jni.require();
    }

    /** Two slots, those in {@code taken} holding an edit that leaves k_cur's value alone. */
    static float[][] slots(int... taken) {
        float[] su = new float[2 * D];
        float[] sw = new float[2 * D_IN];
        float[] kCur = QuadraticPrograms.state().kCur;
        for (int s : taken) {
            Arrays.fill(su, s * D, (s + 1) * D, 0.25f * (s + 1));
            sw[s * D_IN] = kCur[1];  // w . k_cur = k1 k0 - k0 k1 = 0 exactly
            sw[s * D_IN + 1] = -kCur[0];
        }
        return new float[][] {su, sw};
    }

    static EditOutcome run(QuadraticPrograms p, float[][] slots) throws Exception {
        return EditRunnerTest.run(p, new EditRunnerTest.Recorder(), null, null, slots);
    }

    static boolean allZero(float[] a) {
        for (float v : a) {
            if (v != 0f) {
                return false;
            }
        }
        return true;
    }

    @Test
    void theLoopSaysSuccessButTheWrittenEditDoesNot() throws Exception {
        QuadraticPrograms p = new QuadraticPrograms(17);
        p.writeGain = 0.5;  // the written update moves the value half as far as searched
        EditOutcome o = run(p, slots());
        assertEquals(EngineStatus.SUCCESS_CHECK, o.status);
        assertTrue(o.loopSucceeded && o.verified);
        assertFalse(o.succeeded, "the written edit moves the value half way: it misses");
        assertEquals(false, o.metrics().get("succeeded"));
        assertEquals(true, o.metrics().get("loop_succeeded"));

        // the check: u, w in slot 0, the prefix program rerun, one edit-program call at delta 0
        assertEquals(2, p.prefixCalls);
        assertTrue(allZero(p.slotUs.get(0)), "the search ran with the empty slots");
        assertArrayEquals(o.u, Arrays.copyOf(p.lastSlotU, D));
        assertTrue(allZero(Arrays.copyOfRange(p.lastSlotU, D, 2 * D)), "slot 1 stays free");
        assertTrue(allZero(p.deltasSeen.get(p.deltasSeen.size() - 1)), "the written edit at delta 0");

        QuadraticPrograms full = new QuadraticPrograms(17);
        full.writeGain = 1.0;
        EditOutcome ok = run(full, slots());
        assertTrue(ok.succeeded && ok.loopSucceeded && ok.verified);
    }

    @Test
    void theWrittenEditGoesIntoTheFirstFreeSlotNextToTheActiveOnes() throws Exception {
        QuadraticPrograms p = new QuadraticPrograms(17);
        float[][] s = slots(0);
        EditOutcome o = run(p, s);
        assertTrue(o.verified && o.succeeded);
        assertArrayEquals(s[0], p.slotUs.get(0), "the search sees the active edit");
        assertArrayEquals(Arrays.copyOf(s[0], D), Arrays.copyOf(p.lastSlotU, D), "slot 0 kept");
        assertArrayEquals(o.u, Arrays.copyOfRange(p.lastSlotU, D, 2 * D), "the new edit in slot 1");
        assertArrayEquals(slots(0)[0], s[0], "the caller's slots are not changed");
    }

    @Test
    void theLoopMissesItsMarginButTheWrittenEditSaysIt() throws Exception {
        // every row right near the target, but loss - decay stays above 0.5: the loop runs to
        // MAX_STEPS; its end point (quadratic loss ~0.05) shows the target in every rewrite row
        QuadraticPrograms p = new QuadraticPrograms(17);
        p.lossOffset = 1.0;
        p.holdsBelow = 0.1;
        EditOutcome o = run(p, slots());
        assertEquals(EngineStatus.MAX_STEPS, o.status);
        assertFalse(o.loopSucceeded);
        assertTrue(o.verified && o.succeeded, "the margin is the search's stop signal only");
        assertEquals(true, o.metrics().get("succeeded"));
        assertEquals(false, o.metrics().get("loop_succeeded"));
    }

    @Test
    void everySlotTakenTheLoopsVerdictStands() throws Exception {
        QuadraticPrograms p = new QuadraticPrograms(17);
        p.writeGain = 0.5;  // would fail the written check, but it cannot be taken
        EditOutcome o = run(p, slots(0, 1));
        assertEquals(EngineStatus.SUCCESS_CHECK, o.status);
        assertFalse(o.verified);
        assertTrue(o.succeeded && o.loopSucceeded);
        assertEquals(1, p.prefixCalls, "no rerun");
        assertEquals(true, o.metrics().get("succeeded"));
        assertTrue(o.metrics().containsKey("loop_succeeded"));
        assertNull(o.metrics().get("loop_succeeded"), "None in Python: not verified");

        QuadraticPrograms q = new QuadraticPrograms(17);
        q.lossOffset = 1.0;  // the loop fails on its margin; nothing overrides it
        EditOutcome f = run(q, slots(0, 1));
        assertFalse(f.verified || f.succeeded || f.loopSucceeded);
    }

    @Test
    void theSaysItRuleIsTheSuccessRuleWithoutItsMargin() {
        SuccessCriterion rule = new SuccessCriterion(0.75, 0.5);
        float[] correct = {3, 3, 3, 2, 9};  // 3 of 4 rewrite rows full (target_len 3), row 0 among them
        assertTrue(rule.saysIt(correct, 0, 4, 3));
        assertTrue(rule.holds(correct, 0, 4, 3, 0.6, 0.2));
        assertFalse(rule.holds(correct, 0, 4, 3, 0.8, 0.2), "the margin is holds' only");
        assertTrue(rule.saysIt(correct, 0, 4, 3), "and not saysIt's");
        assertFalse(rule.saysIt(new float[] {2, 3, 3, 3}, 0, 4, 3), "row 0 must be full");
        assertFalse(rule.saysIt(new float[] {3, 3, 2, 2}, 0, 4, 3), "1/2 < 0.75");
        assertTrue(rule.saysIt(new float[] {0, 3, 3, 3, 2}, 1, 4, 3), "offset");
        assertFalse(rule.saysIt(new float[] {0, 3, 3, 2, 2}, 1, 4, 3), "offset, 1/2");
    }
}
