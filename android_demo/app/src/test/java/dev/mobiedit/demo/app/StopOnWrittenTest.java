package dev.mobiedit.demo.app;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.mobiedit.demo.core.EditPack;
import dev.mobiedit.demo.core.EditRequest;
import dev.mobiedit.demo.core.Fixtures;
import dev.mobiedit.demo.core.JournalEntry;
import dev.mobiedit.demo.core.Json;
import dev.mobiedit.demo.core.Manifest;
import dev.mobiedit.demo.core.Recipe;
import dev.mobiedit.demo.jni.EngineStatus;
import dev.mobiedit.demo.jni.Jni;
import java.io.File;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Map;
import java.util.concurrent.atomic.AtomicBoolean;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * The recipe's {@code success.stop_on} (export/recipe.py, mobiedit/driver.py search_value's
 * {@code confirm}): with "written" the loop's check passes only where the edit written from the
 * delta does not fail (verify after write), so a delta that meets the loop's rule but whose
 * written edit misses does not stop the search; those checks and refusals are counted and
 * recorded (metrics written_checks / written_refused, config stop_on). "loop" (and a recipe
 * without the field) is the search as before, bit for bit.
 */
class StopOnWrittenTest {
    static final EditRequest REQ = LadderTest.REQ;

    @BeforeAll
    static void lib() {
        Jni.require();
    }

    /** The fixture manifest with recipe.success.stop_on {@code stopOn} (null: without the field). */
    static Manifest manifest(String stopOn) {
        Map<String, Object> m = Fixtures.manifestMap();
        if (stopOn != null) {
            RecipeTest.success(m).put("stop_on", stopOn);
        }
        return RecipeTest.parse(m);
    }

    static float[][] emptySlots() {
        return new float[][] {new float[2 * Fixtures.D_OUT], new float[2 * Fixtures.D_IN]};
    }

    static EditOutcome run(QuadraticPrograms p, String stopOn) throws Exception {
        EditRunner r = new EditRunner(Fixtures.tokenizer(), manifest(stopOn), p,
            KeyStats.identity(Fixtures.D_IN));
        return r.run(REQ, Fixtures.TEMPLATES, emptySlots(), null, null, null);
    }

    static boolean written(float[] slotU) {
        for (float v : slotU) {
            if (v != 0f) {
                return true;
            }
        }
        return false;
    }

    /**
     * The quadratic programs whose first {@code n} written edits (prefix calls with an edit in a
     * slot) do not reach the value (write gain 0: the plain prompt is wrong at delta 0); the
     * search (empty slots) and later written edits are as usual.
     */
    static QuadraticPrograms missingFirst(int n) {
        return new QuadraticPrograms(17) {
            int left = n;

            @Override
            public PrefixState prefix(EditPack pack, float[] u, float[] w) {
                writeGain = written(u) && left-- > 0 ? 0.0 : 1.0;
                return super.prefix(pack, u, w);
            }
        };
    }

    @Test
    void aLoopStopWhoseWrittenEditFailsIsRefusedAndTheSearchGoesOn() throws Exception {
        // "loop": the first delta the rule passes stops the search; its written edit misses
        QuadraticPrograms lp = missingFirst(1);
        EditOutcome loop = run(lp, "loop");
        assertEquals(EngineStatus.SUCCESS_CHECK, loop.status);
        assertTrue(loop.loopSucceeded && loop.verified);
        assertFalse(loop.succeeded, "the one written check, after the search, missed");
        assertEquals(0, loop.writtenChecks);
        assertEquals(0, loop.writtenRefused);
        assertEquals(2, lp.prefixCalls, "the search's, then the written edit's");

        // "written": the same delta is refused (twice here), the loop goes on to one that holds
        QuadraticPrograms wp = missingFirst(2);
        EditOutcome o = run(wp, "written");
        assertEquals(EngineStatus.SUCCESS_CHECK, o.status);
        assertTrue(o.steps > loop.steps, o.steps + " steps vs " + loop.steps);
        assertArrayEquals(loop.history, Arrays.copyOf(o.history, loop.history.length),
            "the same search up to the refused stop");
        assertEquals(2, o.writtenRefused);
        assertEquals(3, o.writtenChecks, "two refused, the third holds");
        assertTrue(o.succeeded && o.loopSucceeded && o.verified, "the verdicts agree");
        assertEquals(1 + 3, wp.prefixCalls, "the search's + one per check; the last one is reused");
        assertEquals(17 * o.steps + 1, o.evals, "written checks are not loss evaluations; a checked base row runs once");
        Map<String, Object> metrics = o.metrics();
        assertEquals(3L, metrics.get("written_checks"));
        assertEquals(2L, metrics.get("written_refused"));
        assertEquals("written", o.configJson().get("stop_on"));

        // the factors: those of the delta where it stopped, as computed after any search
        QuadraticPrograms again = missingFirst(0);
        EditRunner r = new EditRunner(Fixtures.tokenizer(), manifest("written"), again,
            KeyStats.identity(Fixtures.D_IN));
        float[][] f = r.factors(QuadraticPrograms.state(), o.delta);
        assertArrayEquals(f[0], o.u);
        assertArrayEquals(f[1], o.w);
    }

    @Test
    void aWrittenEditThatNeverHoldsRunsTheSearchToItsBudget() throws Exception {
        // write gain 0.5: the written edit needs delta ~ 2 TARGET, where the loop's rule fails
        QuadraticPrograms lp = new QuadraticPrograms(17);
        lp.writeGain = 0.5;
        EditOutcome loop = run(lp, "loop");
        assertEquals(EngineStatus.SUCCESS_CHECK, loop.status);
        assertTrue(loop.loopSucceeded && !loop.succeeded);

        QuadraticPrograms wp = new QuadraticPrograms(17);
        wp.writeGain = 0.5;
        EditOutcome o = run(wp, "written");
        assertEquals(EngineStatus.MAX_STEPS, o.status);
        assertEquals(150, o.steps);
        assertTrue(o.writtenChecks > 1, "checks " + o.writtenChecks);
        assertEquals(o.writtenChecks, o.writtenRefused, "every one refused");
        assertFalse(o.loopSucceeded || o.succeeded);
        assertTrue(o.verified);
        assertEquals(o.writtenRefused, o.metrics().get("written_refused"));
    }

    @Test
    void loopAndAnAbsentStopOnSearchAsBeforeBitForBit() throws Exception {
        for (double gain : new double[] {1.0, 0.5}) {
            QuadraticPrograms absentP = new QuadraticPrograms(17);
            QuadraticPrograms loopP = new QuadraticPrograms(17);
            absentP.writeGain = gain;
            loopP.writeGain = gain;
            EditOutcome absent = run(absentP, null);
            EditOutcome loop = run(loopP, "loop");
            assertEquals("loop", absent.stopOn, "a recipe without stop_on (exported before it)");
            assertEquals(EngineStatus.SUCCESS_CHECK, loop.status);
            assertArrayEquals(absent.delta, loop.delta);
            assertArrayEquals(absent.history, loop.history);
            assertArrayEquals(absent.u, loop.u);
            assertEquals(absent.evals, loop.evals);
            assertEquals(absent.succeeded, loop.succeeded);
            assertEquals(gain == 1.0, loop.succeeded);
            assertEquals(2, loopP.prefixCalls);
            assertEquals(absentP.editCalls, loopP.editCalls);
            assertEquals(2 * loop.steps + 1, loopP.editCalls,
                "one program call per step (K = batch) + one per check + the written edit's");
            assertEquals(0L, loop.metrics().get("written_checks"));
            assertEquals(0L, loop.metrics().get("written_refused"));
            assertEquals("loop", loop.configJson().get("stop_on"));
        }
        // a written edit that holds at the first stop: "written" is the same search, one check
        QuadraticPrograms wp = new QuadraticPrograms(17);
        EditOutcome w = run(wp, "written");
        EditOutcome l = run(new QuadraticPrograms(17), "loop");
        assertArrayEquals(l.delta, w.delta);
        assertArrayEquals(l.history, w.history);
        assertEquals(l.evals, w.evals);
        assertEquals(1, w.writtenChecks);
        assertEquals(0, w.writtenRefused);
        assertEquals(2, wp.prefixCalls, "the check's verdict is the written one: no second check");
    }

    @Test
    void checkAtBaseReadsTheStepsOwnRowAndSavesAProgramCallPerStep() throws Exception {
        QuadraticPrograms up = new QuadraticPrograms(17);
        EditOutcome upd = run(up, "loop");
        Map<String, Object> m = Fixtures.manifestMap();
        RecipeTest.success(m).put("stop_on", "loop");
        RecipeTest.zo(m).put("check_at", "base");
        QuadraticPrograms bp = new QuadraticPrograms(17);
        EditOutcome base = new EditRunner(Fixtures.tokenizer(), RecipeTest.parse(m), bp,
            KeyStats.identity(Fixtures.D_IN)).run(REQ, Fixtures.TEMPLATES, emptySlots(), null, null, null);
        assertEquals(EngineStatus.SUCCESS_CHECK, base.status);
        assertTrue(base.succeeded && upd.succeeded);
        assertArrayEquals(upd.delta, base.delta, "the same points checked: the same stop");
        assertEquals(upd.steps + 1, base.steps, "each check one forward later");
        assertEquals(17L * base.steps, base.evals, "the checks read the steps' rows: no evaluation of their own");
        assertEquals(2 * upd.steps + 1, up.editCalls, "update: a step's call and a check's call (+ the write check)");
        assertEquals(base.steps + 1, bp.editCalls, "base: one call per step (+ the write check)");
        assertEquals("base", ((Map<?, ?>) base.configJson().get("zo")).get("check_at"));
    }

    @Test
    void aStepsBaseRowThatWasCheckedTakesTheChecksLoss() throws Exception {
        QuadraticPrograms p = new QuadraticPrograms(3);
        EditRunnerTest.run(p, new EditRunnerTest.Recorder(), new AtomicBoolean());  // builds the pack
        PrefixState st = QuadraticPrograms.state();
        int d = QuadraticPrograms.D;
        EditObjective o = new EditObjective(p, st, d, 1f, 2, p.lastPack.targetLen, 0.0, null, null);
        float[] x = new float[d];
        x[1] = 0.5f;
        o.check(x, d);
        float[] z = new float[3 * d];
        System.arraycopy(x, 0, z, 0, d);
        z[d] = 1f;
        z[2 * d + 2] = -1f;
        float[] reused = new float[3];
        int calls = p.editCalls;
        o.forward(z, 3, d, reused);
        assertEquals(1 + 2, o.evals(), "the check's row, then rows 1 and 2 only");
        assertEquals(calls + 1, p.editCalls);
        float[] rows = p.deltasSeen.get(p.deltasSeen.size() - 1);
        assertEquals(1f, rows[0], "rows 1 and 2 fill the program's first slots");
        float[] fresh = new float[3];
        new EditObjective(p, st, d, 1f, 2, p.lastPack.targetLen, 0.0, null, null).forward(z, 3, d, fresh);
        assertArrayEquals(fresh, reused, "the same losses as a forward that runs row 0");
        z[0] = Math.nextUp(z[0]);
        o.forward(z, 3, d, reused);
        assertEquals(1 + 2 + 3, o.evals(), "a row 0 one ulp away is run");
    }

    @Test
    void theObjectivesCheckCountsAndAnUntakenVerdictDoesNotRefuse() throws Exception {
        SuccessCriterionTest.Scripted p = SuccessCriterionTest.rows(10, 0.1);  // holds
        List<float[]> asked = new ArrayList<>();
        Boolean[] verdict = {Boolean.FALSE};
        EditObjective.Written w = delta -> {
            asked.add(delta);
            return verdict[0];
        };
        EditObjective o = new EditObjective(p, SuccessCriterionTest.state(), SuccessCriterionTest.D, 2f,
            SuccessCriterionTest.N_REWRITE, SuccessCriterionTest.TARGET_LEN, SuccessCriterionTest.WEIGHT_DECAY,
            new SuccessCriterion(0.75, 0.5), null, w);
        float[] x = {0f, 1.5f, 2f, 0f};
        assertTrue(o.holds(x));
        assertFalse(o.check(x, 4), "the rule holds, the written edit fails");
        assertArrayEquals(new float[] {0f, 3f, 4f, 0f}, asked.get(0), "delta = x * scale");
        verdict[0] = null;
        assertTrue(o.check(x, 4), "every slot taken: the loop's rule stands");
        verdict[0] = Boolean.TRUE;
        assertTrue(o.passes(x));
        assertEquals(3, o.writtenChecks());
        assertEquals(1, o.writtenRefused());
        assertEquals(1, o.evals(), "the point is scored once: later checks of it and the written checks are none");

        SuccessCriterionTest.Scripted miss = SuccessCriterionTest.rows(10, 0.6);  // over the margin
        EditObjective m = new EditObjective(miss, SuccessCriterionTest.state(), SuccessCriterionTest.D, 2f,
            SuccessCriterionTest.N_REWRITE, SuccessCriterionTest.TARGET_LEN, SuccessCriterionTest.WEIGHT_DECAY,
            new SuccessCriterion(0.75, 0.5), null, w);
        asked.clear();
        assertFalse(m.check(x, 4));
        assertTrue(asked.isEmpty(), "asked only where the loop's rule passes");
        assertEquals(0, m.writtenChecks());
    }

    @Test
    void aLadderClimbSumsTheChecksAndTheJournalRecordsThem(@TempDir Path tmp) throws Exception {
        // clamp 1.5 with one active edit: rung 1 (0.75) cannot reach the target, rung 2 can
        File dir = LadderTest.bundle(tmp, 1.5, null, 1);
        File mf = new File(dir, "manifest.json");
        Map<String, Object> m = Json.parseObject(new String(Files.readAllBytes(mf.toPath()), "UTF-8"), "manifest");
        RecipeTest.success(m).put("stop_on", "written");
        Files.write(mf.toPath(), Json.write(m, true).getBytes("UTF-8"));
        BundleSessionTest.FakeRuntime rt = new BundleSessionTest.FakeRuntime();
        BundleSession s = BundleSession.open(dir, (d, mm) -> rt, null);
        assertEquals(Recipe.STOP_WRITTEN, s.recipe().stopOn);
        EditOutcome o = s.edit(REQ, null, null);
        EditOutcome r1 = LadderTest.oneSearch(s, 0.75);
        EditOutcome r2 = LadderTest.oneSearch(s, 1.125);
        assertEquals(2, o.ladderTries);
        assertTrue(o.succeeded);
        assertEquals(r1.writtenChecks + r2.writtenChecks, o.writtenChecks);
        assertEquals(r1.writtenRefused + r2.writtenRefused, o.writtenRefused);
        assertTrue(o.writtenChecks >= 1);

        JournalEntry e = s.apply(o);
        s.close();
        BundleSession again = BundleSession.open(dir, (d, mm) -> rt, null);
        JournalEntry read = again.journal().entry(e.id);
        again.close();
        assertEquals(o.writtenChecks, read.metrics.get("written_checks"));
        assertEquals(o.writtenRefused, read.metrics.get("written_refused"));
        assertEquals("written", read.config.get("stop_on"));
        assertEquals(2L, read.config.get("ladder_tries"));
    }

    @Test
    void climbedSumsEachRungsChecks() {
        EditOutcome a = outcome(4, 3);
        EditOutcome b = outcome(2, 1);
        EditOutcome c = EditOutcome.climbed(Arrays.asList(a, b), 2.0);
        assertEquals(6, c.writtenChecks);
        assertEquals(4, c.writtenRefused);
        assertEquals("written", c.stopOn);
        assertEquals("written", c.configJson().get("stop_on"));
    }

    private static EditOutcome outcome(long checks, long refused) {
        Manifest m = manifest("written");
        return new EditOutcome(REQ, EngineStatus.SUCCESS_CHECK, true, true, true, 3, 10,
            new double[] {1.0}, new float[Fixtures.D_OUT], new float[Fixtures.D_OUT], new float[Fixtures.D_IN], 5,
            EditRunner.forBundle(m, m.dOut()), SuccessCriterion.of(m.recipe), "written", checks, refused);
    }
}
