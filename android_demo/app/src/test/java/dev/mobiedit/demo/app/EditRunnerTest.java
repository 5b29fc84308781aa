package dev.mobiedit.demo.app;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.mobiedit.demo.core.EditRequest;
import dev.mobiedit.demo.core.Fixtures;
import dev.mobiedit.demo.core.Manifest;
import dev.mobiedit.demo.core.ManifestReader;
import dev.mobiedit.demo.core.Json;
import dev.mobiedit.demo.core.MobiEditError;
import dev.mobiedit.demo.jni.EngineStatus;
import dev.mobiedit.demo.jni.Jni;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Map;
import java.util.concurrent.atomic.AtomicBoolean;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;

/** The whole edit pipeline with the real native engine and a Java quadratic "edit program". */
class EditRunnerTest {
    static final List<String> TEMPLATES = Fixtures.TEMPLATES;

    @BeforeAll
    static void lib() {
        Jni.require();
    }

    static Manifest manifest() {
        Map<String, Object> m = Fixtures.manifestMap();
        @SuppressWarnings("unchecked")
        Map<String, Object> files = (Map<String, Object>) m.get("files");
        files.put("model.pte", Fixtures.map("sha256", String.join("", java.util.Collections.nCopies(64, "0")), "bytes", 1L));
        return ManifestReader.parse(Json.write(m, true));
    }

    /** {@link #manifest()} with edit.update.rule {@code rule}. */
    static Manifest manifest(String rule) {
        Map<String, Object> m = Fixtures.manifestMap();
        @SuppressWarnings("unchecked")
        Map<String, Object> files = (Map<String, Object>) m.get("files");
        files.put("model.pte", Fixtures.map("sha256", String.join("", java.util.Collections.nCopies(64, "0")), "bytes", 1L));
        @SuppressWarnings("unchecked")
        Map<String, Object> edit = (Map<String, Object>) m.get("edit");
        edit.put("update", Fixtures.map("rule", rule, "edited_weight", 4.0));
        return ManifestReader.parse(Json.write(m, true));
    }

    @Test
    void aProtectRuleSolvesWithTheGivenKeysJournalsTheKeyAndNeedsThem() throws Exception {
        EditRequest req = EditRequest.fromForm("Danielle Darrieux", "The mother tongue of {} is", "English");
        float[][] slots = {new float[2 * Fixtures.D_OUT], new float[2 * Fixtures.D_IN]};
        KeyStats ks = KeyStats.identity(Fixtures.D_IN);
        EditRunner r = new EditRunner(Fixtures.tokenizer(), manifest("protect"), new QuadraticPrograms(17), ks);
        MobiEditError none = assertThrows(MobiEditError.class,
            () -> r.run(req, TEMPLATES, slots, null, null, new AtomicBoolean()));
        assertTrue(none.where().startsWith("edit.update.rule protect"), none.where());
        float[][] prior = new float[2][Fixtures.D_IN];
        prior[0][0] = 1f;
        prior[1][1] = 2f;
        r.setProtectedKeys(prior);
        EditOutcome o = r.run(req, TEMPLATES, slots, null, null, new AtomicBoolean());
        PrefixState st = QuadraticPrograms.state();
        assertArrayEquals(st.kBar, o.key);
        float[] c = ks.protectDirection(st.kBar, prior, 4.0);
        double dot = 0;
        for (int i = 0; i < c.length; i++) {
            dot += (double) st.kCur[i] * c[i];
        }
        for (int i = 0; i < c.length; i++) {
            assertEquals(c[i] / dot, o.w[i], 1e-6, "w[" + i + "]");
        }
        // with C = I: (I + 4 K_p^T K_p)^-1 shrinks the held coordinates (1/5 and 1/17)
        assertEquals(st.kBar[0] / 5.0, c[0], 1e-5);
        assertEquals(st.kBar[1] / 17.0, c[1], 1e-5);
        assertEquals(st.kBar[2], c[2], 1e-6);
    }

    static class Recorder implements EditRunner.Listener {
        String before;
        int prepared;
        final List<double[]> steps = new ArrayList<>();
        final List<double[]> rungs = new ArrayList<>();
        AtomicBoolean cancelAt3;

        @Override
        public void prepared(String b) {
            before = b;
            prepared++;
        }

        @Override
        public void rung(int index, int count, double fraction, double clamp) {
            rungs.add(new double[] {index, count, fraction, clamp, steps.size()});
        }

        @Override
        public void progress(long step, double loss, long evals) {
            steps.add(new double[] {step, loss, evals});
            if (cancelAt3 != null && step == 3) {
                cancelAt3.set(true);
            }
        }
    }

    static EditOutcome run(QuadraticPrograms p, Recorder rec, AtomicBoolean cancel) throws Exception {
        return run(p, rec, cancel, null);
    }

    static EditOutcome run(QuadraticPrograms p, Recorder rec, AtomicBoolean cancel, SuccessCriterion success)
            throws Exception {
        return run(p, rec, cancel, success, new float[][] {new float[2 * Fixtures.D_OUT], new float[2 * Fixtures.D_IN]});
    }

    static EditOutcome run(QuadraticPrograms p, Recorder rec, AtomicBoolean cancel, SuccessCriterion success,
            float[][] slots) throws Exception {
        EditRunner r = new EditRunner(Fixtures.tokenizer(), manifest(), p, KeyStats.identity(Fixtures.D_IN));
        if (success != null) {
            r.setSuccess(success);
        }
        EditRequest req = EditRequest.fromForm("Danielle Darrieux", "The mother tongue of {} is", "English");
        return r.run(req, TEMPLATES, slots, prompt -> "French", rec, cancel);
    }

    @Test
    void findsTheDeltaStopsEarlyAndComputesRomeFactors() throws Exception {
        QuadraticPrograms p = new QuadraticPrograms(17);
        Recorder rec = new Recorder();
        EditOutcome o = run(p, rec, new AtomicBoolean());
        assertEquals(EngineStatus.SUCCESS_CHECK, o.status, "losses " + Arrays.toString(o.history));
        assertTrue(o.succeeded && o.loopSucceeded && o.verified);
        assertTrue(o.steps < 150, "early stop, steps " + o.steps);
        assertEquals("French", rec.before);
        assertEquals(o.steps, rec.steps.size());
        assertEquals(1.0, rec.steps.get(0)[1], 1e-6);  // loss at delta 0 is ||T||^2/||T||^2
        assertEquals(17.0 * o.steps + 1, o.evals,
            "17 per step + 1 per check, less each step's base row the check before it scored (the write check is none)");
        assertEquals(2, p.prefixCalls, "the search's, then the written edit's");
        assertEquals(3, p.lastPack.nRows);
        assertEquals(2, p.lastPack.nRewrite);
        assertTrue(QuadraticPrograms.loss(o.delta, 0) < 0.02);

        // u = v* - W k_cur = delta;  w = C^-1 k_bar / (k_cur . C^-1 k_bar) with C = I
        PrefixState st = QuadraticPrograms.state();
        assertArrayEquals(o.delta, o.u, 1e-6f);
        double dot = 0;
        for (int i = 0; i < st.kBar.length; i++) {
            dot += (double) st.kCur[i] * st.kBar[i];
        }
        for (int i = 0; i < st.kBar.length; i++) {
            assertEquals(st.kBar[i] / dot, o.w[i], 1e-6);
        }
        Map<String, Object> metrics = o.metrics();
        assertEquals(true, metrics.get("succeeded"));
        assertEquals(true, metrics.get("loop_succeeded"));
        assertEquals("SUCCESS_CHECK", metrics.get("status"));
        assertEquals("fzoo", ((java.util.Map<?, ?>) o.configJson().get("zo")).get("estimator"));
        assertFalse(o.configJson().containsKey("ladder_tries"), "no ladder climbed");
        assertFalse(o.configJson().containsKey("clamp_norm_factor"));
        assertEquals(0.75, o.configJson().get("success_fraction"));
        assertEquals(0.5, o.configJson().get("success_nll"));
    }

    // The success rule (SuccessCriterion) through the whole pipeline. The fixture request has
    // n_rewrite = 2 (plain prompt + one context template), weight_decay 0.5, ||v_init||^2 = 8.

    @Test
    void plainPromptWrongIsNeverASuccessWhateverTheShare() throws Exception {
        QuadraticPrograms p = new QuadraticPrograms(17);
        p.wrongRow = 0;  // row 1 becomes fully correct, row 0 never: share 1/2 >= 0.5
        EditOutcome o = run(p, new Recorder(), null, new SuccessCriterion(0.5, 0.5));
        assertEquals(EngineStatus.MAX_STEPS, o.status);
        assertFalse(o.succeeded);
    }

    @Test
    void tooSmallAShareOfCorrectRowsIsNotASuccess() throws Exception {
        QuadraticPrograms p = new QuadraticPrograms(17);
        p.wrongRow = 1;  // plain prompt right, share 1/2 < 0.75
        EditOutcome o = run(p, new Recorder(), null);
        assertEquals(EngineStatus.MAX_STEPS, o.status);
        assertFalse(o.succeeded);

        QuadraticPrograms q = new QuadraticPrograms(17);
        q.wrongRow = 1;
        EditOutcome ok = run(q, new Recorder(), null, new SuccessCriterion(0.5, 0.5));
        assertEquals(EngineStatus.SUCCESS_CHECK, ok.status);
        assertTrue(ok.succeeded);
        assertEquals(0.5, ok.configJson().get("success_fraction"));
    }

    @Test
    void theLossMarginIsTheLossWithoutItsDecayTerm() throws Exception {
        // every row right, but loss - decay > 0.5: loss ~ 1.0, decay = 0.5 ||delta|| / 8 ~ 0.19
        QuadraticPrograms p = new QuadraticPrograms(17);
        p.lossOffset = 1.0;
        EditOutcome o = run(p, new Recorder(), null);
        assertEquals(EngineStatus.MAX_STEPS, o.status);
        assertFalse(o.loopSucceeded);
        // the search ends at a quadratic loss of about 0.05: the written edit misses too
        assertTrue(o.verified);
        assertFalse(o.succeeded, "loss " + QuadraticPrograms.loss(o.delta, 0));
        assertEquals(false, o.metrics().get("loop_succeeded"));

        // loss ~ 0.6 > 0.5, but loss - decay ~ 0.42 <= 0.5: the decay term is left out
        QuadraticPrograms q = new QuadraticPrograms(17);
        q.lossOffset = 0.6;
        EditOutcome ok = run(q, new Recorder(), null);
        assertEquals(EngineStatus.SUCCESS_CHECK, ok.status, "losses " + Arrays.toString(ok.history));
        assertTrue(ok.succeeded);
        double loss = QuadraticPrograms.loss(ok.delta, 0) + 0.6;
        double decay = SuccessCriterion.decay(0.5, ok.delta, 0, ok.delta.length, QuadraticPrograms.state().vInit);
        assertTrue(loss > 0.5 && loss - decay <= 0.5, "loss " + loss + ", decay " + decay);

        // a looser margin lets the first one through
        QuadraticPrograms r = new QuadraticPrograms(17);
        r.lossOffset = 1.0;
        assertTrue(run(r, new Recorder(), null, new SuccessCriterion(0.75, 1.5)).loopSucceeded);
    }

    @Test
    void smallerProgramBatchesGiveTheSameSearch() throws Exception {
        EditOutcome a = run(new QuadraticPrograms(17), new Recorder(), null);
        QuadraticPrograms small = new QuadraticPrograms(5);
        EditOutcome b = run(small, new Recorder(), null);
        assertArrayEquals(a.delta, b.delta);
        assertArrayEquals(a.history, b.history);
        assertEquals(a.evals, b.evals);
        assertEquals(b.steps * 4 + b.steps + 1, small.editCalls,
            "ceil(17/5) calls per step + 1 check, + 1 for the written edit");
    }

    @Test
    void notConvergedStillGivesFactors() throws Exception {
        QuadraticPrograms p = new QuadraticPrograms(17);
        p.holdsBelow = -1;  // the edit never "holds"
        EditOutcome o = run(p, new Recorder(), null);
        assertEquals(EngineStatus.MAX_STEPS, o.status);
        assertFalse(o.succeeded);
        assertEquals(150, o.steps);
        assertEquals(Fixtures.D_OUT, o.u.length);
    }

    @Test
    void cancelStopsTheLoop() throws Exception {
        Recorder rec = new Recorder();
        AtomicBoolean cancel = new AtomicBoolean();
        rec.cancelAt3 = cancel;
        QuadraticPrograms p = new QuadraticPrograms(17);
        p.holdsBelow = -1;
        assertNull(run(p, rec, cancel));
        assertEquals(3, rec.steps.size());
    }

    @Test
    void programErrorsSurfaceWithTheirMessage() throws Exception {
        QuadraticPrograms broken = new QuadraticPrograms(17) {
            @Override
            public void edit(PrefixState st, float[] d, float[] l, float[] c) {
                throw new IllegalStateException("ExecuTorch: method 'forward' failed (0x12)");
            }
        };
        Exception e = assertThrows(Exception.class, () -> run(broken, new Recorder(), null));
        assertTrue(String.valueOf(e.getCause()).contains("0x12"), String.valueOf(e));
    }

    @Test
    void prefixOutputsOfTheWrongSizeAreRefused() throws Exception {
        QuadraticPrograms wrong = new QuadraticPrograms(17) {
            @Override
            public PrefixState prefix(dev.mobiedit.demo.core.EditPack b, float[] u, float[] w) {
                PrefixState s = state();
                return new PrefixState(s.handle, new float[3], s.kCur, s.outCur, s.vInit);
            }
        };
        MobiEditError e = assertThrows(MobiEditError.class, () -> run(wrong, new Recorder(), null));
        assertTrue(e.getMessage().contains("output 'k_bar' has length 3"), e.getMessage());
    }
}
