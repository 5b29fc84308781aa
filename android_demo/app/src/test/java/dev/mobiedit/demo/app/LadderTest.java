package dev.mobiedit.demo.app;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.mobiedit.demo.core.EditRequest;
import dev.mobiedit.demo.core.EditTarget;
import dev.mobiedit.demo.core.Fixtures;
import dev.mobiedit.demo.core.Journal;
import dev.mobiedit.demo.core.JournalEntry;
import dev.mobiedit.demo.core.Json;
import dev.mobiedit.demo.core.Manifest;
import dev.mobiedit.demo.core.ManifestReader;
import dev.mobiedit.demo.core.Recipe;
import dev.mobiedit.demo.core.Tensor;
import dev.mobiedit.demo.jni.Jni;
import java.io.File;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collections;
import java.util.List;
import java.util.Map;
import java.util.concurrent.atomic.AtomicBoolean;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * The clamp ladder (mobiedit/ladder.py, export/ops.py _edit_one) in the app: when an edit climbs,
 * where it stops, what it costs and what the journal records. The fake programs
 * (QuadraticPrograms) reach their target, ||TARGET|| = 3.02, only with ||delta|| <= clamp * sqrt(8),
 * i.e. from clamp_norm_factor 1.07 on.
 */
class LadderTest {
    static final EditRequest REQ = EditRequest.fromForm("Danielle Darrieux", "The mother tongue of {} is",
        "English");

    @BeforeAll
    static void lib() {
        Jni.require();
    }

    /** Records the listener's events. */
    static final class Events extends EditRunnerTest.Recorder {
        AtomicBoolean cancelAtRung2;

        @Override
        public void rung(int index, int count, double fraction, double clamp) {
            super.rung(index, count, fraction, clamp);
            if (cancelAtRung2 != null && index == 2) {
                cancelAtRung2.set(true);
            }
        }
    }

    /**
     * A bundle with edit.objective.clamp_norm_factor {@code clamp}, recipe.ladder {@code ladder}
     * (null: the exporter's default) and {@code active} edits already in the journal that leave
     * the fake's value at k_cur alone (w . k_cur = 0).
     */
    @SuppressWarnings("unchecked")
    static File bundle(Path tmp, double clamp, Map<String, Object> ladder, int active) throws Exception {
        File dir = tmp.resolve("bundle").toFile();
        Map<String, Object> m = Fixtures.writeBundle(dir, Fixtures.baseWeight());
        ((Map<String, Object>) ((Map<String, Object>) m.get("edit")).get("objective")).put("clamp_norm_factor", clamp);
        if (ladder != null) {
            ((Map<String, Object>) m.get("recipe")).put("ladder", ladder);
        }
        Files.write(new File(dir, "manifest.json").toPath(), Json.write(m, true).getBytes("UTF-8"));
        Manifest man = ManifestReader.open(dir, null);
        Journal j = Journal.open(new File(dir, "journal"));
        float[] kCur = QuadraticPrograms.state().kCur;
        for (int i = 0; i < active; i++) {
            float[] u = new float[Fixtures.D_OUT];
            Arrays.fill(u, 0.1f * (i + 1));
            float[] w = new float[Fixtures.D_IN];
            w[0] = kCur[1];
            w[1] = -kCur[0];
            j.record(REQ, EditTarget.of(man), u, w, Tensor.f32("b", new long[] {Fixtures.D_OUT, Fixtures.D_IN},
                Fixtures.baseWeight()), Collections.<String, Object>emptyMap(), Collections.<String, Object>emptyMap(),
                BundleSession.nowIso());
        }
        return dir;
    }

    static Map<String, Object> ladder(List<Object> fractions, long fromEdits) {
        return Fixtures.map("fractions", new ArrayList<Object>(fractions), "from_edits", fromEdits);
    }

    /** One search of {@code s}'s edit at {@code clamp} with fresh fake programs, as a rung runs it. */
    static EditOutcome oneSearch(BundleSession s, double clamp) throws Exception {
        Manifest m = s.manifest();
        EditRunner r = new EditRunner(s.tokenizer(), m, new QuadraticPrograms(17),
            KeyStats.open(s.folder(), m.dIn(), m.dOut()));
        r.setConfig(EditRunner.forBundle(m, m.dOut(), clamp));
        float[][] slots = s.journal().slotFactors(m.editModule, m.slots, m.dOut(), m.dIn());
        return r.run(REQ, m.edit.templates, slots, null, null, null);
    }

    @Test
    void needsLadderAndSequentialLadderAsInPython() {
        assertFalse(Ladder.needsLadder(1, 2));
        assertTrue(Ladder.needsLadder(2, 2));
        assertTrue(Ladder.needsLadder(1, 1));
        assertArrayEquals(new double[] {2.0, 3.0, 4.0}, Ladder.sequentialLadder(4.0, Recipe.DEFAULT_LADDER));
        Recipe r = Recipe.shippedFallback(17);
        assertTrue(Ladder.fractionsFor(r, 0).isEmpty(), "the first edit of an empty bundle");
        assertEquals(Recipe.DEFAULT_LADDER, Ladder.fractionsFor(r, 1));
        assertThrows(IllegalArgumentException.class,
            () -> Ladder.climb(new ArrayList<Double>(), 4.0, null, null, null, null));
    }

    @Test
    void theFirstEditOfAnEmptyBundleDoesNotClimbTheSecondDoes(@TempDir Path tmp) throws Exception {
        BundleSessionTest.FakeRuntime rt = new BundleSessionTest.FakeRuntime();
        BundleSession s = BundleSession.open(bundle(tmp, 4.0, null, 0), (d, m) -> rt, null);
        Events ev = new Events();
        EditOutcome first = s.edit(REQ, ev, null);
        assertTrue(first.succeeded);
        assertEquals(0, first.ladderTries);
        assertTrue(ev.rungs.isEmpty());
        JournalEntry e1 = s.apply(first);
        assertFalse(e1.config.containsKey("ladder_tries") || e1.config.containsKey("clamp_norm_factor"));

        Events ev2 = new Events();
        EditOutcome second = s.edit(REQ, ev2, null);
        assertEquals(1, second.ladderTries, "the first rung (0.5 x 4) holds");
        assertEquals(2.0, second.ladderClamp);
        assertEquals(1, ev2.rungs.size());
        assertArrayEquals(new double[] {1, 3, 0.5, 2.0, 0}, ev2.rungs.get(0));
        assertEquals(2.0 * Math.sqrt(Fixtures.D_OUT), second.config.maxNorm, 1e-12);
        JournalEntry e2 = s.apply(second);
        assertLadderKeys(e2, 2.0, 1L);
        s.close();
    }

    @Test
    void climbingStopsAtTheFirstRungThatHoldsAndSumsItsCost(@TempDir Path tmp) throws Exception {
        // clamp 1.5: rung 1 (0.75) cannot reach the target, rung 2 (1.125) can, rung 3 is not tried
        BundleSessionTest.FakeRuntime rt = new BundleSessionTest.FakeRuntime();
        BundleSession s = BundleSession.open(bundle(tmp, 1.5, null, 1), (d, m) -> rt, null);
        Events ev = new Events();
        EditOutcome o = s.edit(REQ, ev, null);
        EditOutcome r1 = oneSearch(s, 0.75);
        EditOutcome r2 = oneSearch(s, 1.125);
        assertFalse(r1.succeeded);
        assertTrue(r2.succeeded);
        assertTrue(o.succeeded && o.verified);
        assertEquals(2, o.ladderTries);
        assertEquals(1.125, o.ladderClamp);
        assertEquals(r1.evals + r2.evals, o.evals, "evaluations summed over the rungs");
        assertEquals(r1.steps + r2.steps, o.steps);
        double[] both = new double[r1.history.length + r2.history.length];
        System.arraycopy(r1.history, 0, both, 0, r1.history.length);
        System.arraycopy(r2.history, 0, both, r1.history.length, r2.history.length);
        assertArrayEquals(both, o.history, "losses concatenated");
        assertArrayEquals(r2.delta, o.delta, "the outcome is the last rung's");
        assertArrayEquals(r2.u, o.u);
        assertEquals(r2.status, o.status);
        // the listener: rung 1 then rung 2, the before-answer once, evaluations counted across rungs
        assertEquals(2, ev.rungs.size());
        assertArrayEquals(new double[] {1, 3, 0.5, 0.75, 0}, ev.rungs.get(0));
        assertArrayEquals(new double[] {2, 3, 0.75, 1.125, r1.steps}, ev.rungs.get(1));
        assertEquals(1, ev.prepared);
        assertEquals(" English", ev.before, "the fake answers English once a slot holds an edit");
        assertEquals(o.steps, ev.steps.size());
        assertEquals(1.0, ev.steps.get((int) r1.steps)[0], "rung 2 counts its own steps");
        assertTrue(ev.steps.get(ev.steps.size() - 1)[2] > r1.evals, "evaluations go on counting");
        assertEquals(1, rt.starts, "one before-answer, in the first rung");

        JournalEntry e = s.apply(o);
        assertLadderKeys(e, 1.125, 2L);
        assertEquals(o.evals, e.metrics.get("loss_evals"));
        assertEquals(true, e.metrics.get("succeeded"));
        s.close();
    }

    @Test
    void everyRungFailsTheLastOneIsTheOutcome(@TempDir Path tmp) throws Exception {
        BundleSessionTest.FakeRuntime rt = new BundleSessionTest.FakeRuntime();
        BundleSession s = BundleSession.open(bundle(tmp, 0.5, null, 1), (d, m) -> rt, null);
        EditOutcome o = s.edit(REQ, null, null);
        assertFalse(o.succeeded);
        assertEquals(3, o.ladderTries);
        assertEquals(0.5, o.ladderClamp);
        assertEquals(oneSearch(s, 0.25).evals + oneSearch(s, 0.375).evals + oneSearch(s, 0.5).evals, o.evals);
        s.close();
    }

    @Test
    void aOneRungLadderIsOneSearchAtTheManifestsClamp(@TempDir Path tmp) throws Exception {
        BundleSessionTest.FakeRuntime rt = new BundleSessionTest.FakeRuntime();
        BundleSession s = BundleSession.open(bundle(tmp, 1.5, ladder(Arrays.<Object>asList(1.0), 2L), 1),
            (d, m) -> rt, null);
        EditOutcome o = s.edit(REQ, null, null);
        EditOutcome plain = oneSearch(s, 1.5);
        assertArrayEquals(plain.delta, o.delta);
        assertArrayEquals(plain.history, o.history);
        assertEquals(plain.evals, o.evals);
        assertEquals(plain.succeeded, o.succeeded);
        assertEquals(1, o.ladderTries, "recorded as Python records it: one rung");
        assertEquals(1.5, o.ladderClamp);
        s.close();
    }

    @Test
    void theRecipesFromEditsDecides(@TempDir Path tmp) throws Exception {
        BundleSessionTest.FakeRuntime rt = new BundleSessionTest.FakeRuntime();
        Map<String, Object> lad = ladder(Arrays.<Object>asList(0.5, 1.0), 3L);
        BundleSession s = BundleSession.open(bundle(tmp, 4.0, lad, 1), (d, m) -> rt, null);
        assertEquals(0, s.edit(REQ, null, null).ladderTries, "two edits on the bundle < 3");
        s.close();

        BundleSessionTest.FakeRuntime rt2 = new BundleSessionTest.FakeRuntime();
        File first = bundle(tmp.resolve("one"), 4.0, ladder(Arrays.<Object>asList(0.5, 1.0), 1L), 0);
        BundleSession t = BundleSession.open(first, (d, m) -> rt2, null);
        EditOutcome o = t.edit(REQ, null, null);
        assertEquals(1, o.ladderTries, "from_edits 1: even the first edit climbs");
        assertEquals(2.0, o.ladderClamp);
        t.close();
    }

    @Test
    void cancelStopsTheClimbBetweenAndWithinRungs(@TempDir Path tmp) throws Exception {
        BundleSessionTest.FakeRuntime rt = new BundleSessionTest.FakeRuntime();
        BundleSession s = BundleSession.open(bundle(tmp, 1.5, null, 1), (d, m) -> rt, null);
        Events between = new Events();
        AtomicBoolean cancel = new AtomicBoolean();
        between.cancelAtRung2 = cancel;  // set as rung 2 starts: its search stops at once
        assertNull(s.edit(REQ, between, cancel));
        assertEquals(2, between.rungs.size());

        Events within = new Events();
        AtomicBoolean cancel2 = new AtomicBoolean();
        within.cancelAt3 = cancel2;  // step 3 of rung 1
        assertNull(s.edit(REQ, within, cancel2));
        assertEquals(1, within.rungs.size(), "no further rung");
        assertEquals(3, within.steps.size());

        AtomicBoolean before = new AtomicBoolean(true);
        Events none = new Events();
        assertNull(s.edit(REQ, none, before));
        assertTrue(none.rungs.isEmpty(), "cancelled before the first rung");
        s.close();
    }

    /** The journal keys of a climbed ladder, as export/ops.py climb_bundle_edit writes them. */
    private static void assertLadderKeys(JournalEntry e, double clamp, long tries) {
        assertEquals(clamp, e.config.get("clamp_norm_factor"));
        assertEquals(tries, e.config.get("ladder_tries"));
        assertEquals(false, e.config.get("ladder_warm"));
    }
}
