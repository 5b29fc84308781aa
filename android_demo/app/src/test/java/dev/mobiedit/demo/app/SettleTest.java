package dev.mobiedit.demo.app;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.mobiedit.demo.core.Fixtures;
import dev.mobiedit.demo.core.Manifest;
import dev.mobiedit.demo.core.Recipe;
import dev.mobiedit.demo.jni.EngineStatus;
import dev.mobiedit.demo.jni.Jni;
import java.util.Arrays;
import java.util.Map;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;

/**
 * The recipe's settle phase on the phone (app.SettlePhase; mobiedit/driver.py settle_value):
 * after the first success the kept delta is shrunk and searched again, a round's delta kept only
 * if it passes and is shorter; off (rounds 0, or a recipe without the field) the search is as
 * before, bit for bit; the journal's config records the phase that ran.
 */
class SettleTest {
    @BeforeAll
    static void lib() {
        Jni.require();
    }

    static Manifest manifest(long rounds, double shrink, long steps) {
        return manifest(rounds, shrink, steps, 0.5);
    }

    /** The fixture manifest with this settle phase and Adam's {@code lr}. */
    static Manifest manifest(long rounds, double shrink, long steps, double lr) {
        Map<String, Object> m = Fixtures.manifestMap();
        RecipeTest.zo(m).put("lr", lr);
        RecipeTest.settle(m).put("rounds", rounds);
        RecipeTest.settle(m).put("shrink", shrink);
        RecipeTest.settle(m).put("steps", steps);
        return RecipeTest.parse(m);
    }

    static EditOutcome run(QuadraticPrograms p, Manifest m) throws Exception {
        EditRunner r = new EditRunner(Fixtures.tokenizer(), m, p, KeyStats.identity(Fixtures.D_IN));
        return r.run(LadderTest.REQ, Fixtures.TEMPLATES, StopOnWrittenTest.emptySlots(), null, null, null);
    }

    static double norm(float[] x) {
        double s = 0;
        for (float v : x) {
            s += (double) v * v;
        }
        return Math.sqrt(s);
    }

    /** A wide success region (a quarter of ||TARGET||^2): room for a shorter delta that still passes. */
    static QuadraticPrograms wide() {
        QuadraticPrograms p = new QuadraticPrograms(17);
        p.holdsBelow = 0.25;
        return p;
    }

    @Test
    void aSettledSearchKeepsOnlyShorterPassingDeltas() throws Exception {
        EditOutcome plain = run(wide(), manifest(0, 0.8, 20));
        QuadraticPrograms sp = wide();
        EditOutcome o = run(sp, manifest(4, 0.8, 20));
        assertEquals(EngineStatus.SUCCESS_CHECK, o.status);
        assertTrue(plain.succeeded && o.succeeded && o.loopSucceeded);
        assertTrue(o.steps > plain.steps, o.steps + " steps vs " + plain.steps);
        assertTrue(o.evals > plain.evals);
        assertArrayEquals(plain.history, Arrays.copyOf(o.history, plain.history.length),
            "the same search up to its first success");
        assertEquals(o.steps, o.history.length, "every round's base losses follow");
        assertTrue(o.settled >= 0 && o.settled <= 4, "settled " + o.settled);
        if (o.settled == 0) {
            assertArrayEquals(plain.delta, o.delta);
        } else {
            assertTrue(norm(o.delta) < norm(plain.delta), norm(o.delta) + " vs " + norm(plain.delta));
        }
        assertTrue(QuadraticPrograms.loss(o.delta, 0) < sp.holdsBelow, "the kept delta passes");
        Map<String, Object> c = o.configJson();
        @SuppressWarnings("unchecked")
        Map<String, Object> st = (Map<String, Object>) c.get("settle");
        assertEquals(4L, st.get("rounds"));
        assertEquals(0.8, st.get("shrink"));
        assertEquals(20L, st.get("steps"));
    }

    /**
     * Programs whose loss and success read one coordinate only (loss (x3 - 2)^2, success x3 &gt;= 1,
     * x = shift + delta): whatever the search's steps add to the other coordinates is noise
     * the edit does not need — what the settle phase is for.
     */
    static QuadraticPrograms oneCoordinate() {
        return new QuadraticPrograms(17) {
            @Override
            public void edit(PrefixState st, float[] deltas, float[] losses, float[] correct) {
                super.edit(st, deltas, losses, correct);
                float[] shift = (float[]) st.handle;
                int nRewrite = correct.length / batchRows();
                for (int r = 0; r < batchRows(); r++) {
                    double x3 = shift[3] + deltas[r * D + 3];
                    losses[r] = (float) ((x3 - 2) * (x3 - 2) / 4);
                    for (int j = 0; j < nRewrite; j++) {
                        correct[r * nRewrite + j] = x3 >= 1 ? lastPack.targetLen : lastPack.targetLen - 1;
                    }
                }
            }
        };
    }

    @Test
    void aFirstSuccessCarryingNoiseIsShortened() throws Exception {
        // small steps (lr 0.02): each adds little noise, so a shrunk start can end shorter
        EditOutcome plain = run(oneCoordinate(), manifest(0, 0.9, 20, 0.02));
        EditOutcome o = run(oneCoordinate(), manifest(5, 0.9, 20, 0.02));
        assertTrue(plain.succeeded && o.succeeded);
        assertTrue(o.settled >= 1, "settled " + o.settled);
        assertTrue(norm(o.delta) < norm(plain.delta), norm(o.delta) + " vs " + norm(plain.delta));
        assertTrue(o.delta[3] >= 1, "the kept delta passes: " + o.delta[3]);
    }

    @Test
    void offIsTheSearchAsBeforeBitForBit() throws Exception {
        EditOutcome off = run(new QuadraticPrograms(17), manifest(0, 0.8, 20));
        Map<String, Object> m = Fixtures.manifestMap();
        ((Map<?, ?>) m.get("recipe")).remove("settle");
        EditOutcome absent = run(new QuadraticPrograms(17), RecipeTest.parse(m));
        assertArrayEquals(off.delta, absent.delta);
        assertArrayEquals(off.history, absent.history);
        assertEquals(off.evals, absent.evals);
        assertEquals(0, off.settled);
        assertNull(off.configJson().get("settle"));
        assertFalse(off.configJson().containsKey("settle"));
    }
}
