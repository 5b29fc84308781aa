package dev.mobiedit.demo.jni;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.mobiedit.demo.core.Recipe;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;

/** The real native engine (native/) through the JNI bridge, driven by a quadratic loss in Java. */
class NativeEngineTest {
    static final int D = 8;
    static final float[] TARGET = {0.5f, -1f, 0.25f, 2f, -0.75f, 1f, 0f, -1.5f};

    @BeforeAll
    static void lib() {
        Jni.require();
    }

    /** loss(z) = ||z - TARGET||^2, counting calls. */
    static final class Quadratic implements NativeEngine.Forward, NativeEngine.Check {
        int forwards;
        int checks;
        double checkRadius = 0.3;

        static double loss(float[] z, int off) {
            double s = 0;
            for (int i = 0; i < D; i++) {
                double e = z[off + i] - TARGET[i];
                s += e * e;
            }
            return s;
        }

        @Override
        public void forward(float[] deltas, int rows, int d, float[] out) {
            assertEquals(D, d);
            forwards++;
            for (int r = 0; r < rows; r++) {
                out[r] = (float) loss(deltas, r * d);
            }
        }

        @Override
        public boolean check(float[] x, int d) {
            checks++;
            return Math.sqrt(loss(x, 0)) < checkRadius;
        }
    }

    static EngineConfig fzoo() {
        EngineConfig c = EngineConfig.defaults();
        c.estimator = EngineConfig.EST_FZOO;
        c.nDirs = 16;
        c.h = 0.01;
        c.optimizer = EngineConfig.OPT_ADAM;
        c.lr = 0.05;
        c.maxSteps = 400;
        return c;
    }

    @Test
    void versionNamesAndDefaults() {
        assertEquals(2, NativeEngine.abiVersion());
        assertEquals("SUCCESS_CHECK", NativeEngine.statusName(2));
        assertEquals("UNKNOWN", NativeEngine.statusName(99));
        EngineConfig c = EngineConfig.defaults();
        assertEquals(EngineConfig.EST_PAPER, c.estimator);
        assertEquals(5, c.nDirs);
        assertEquals(1e-3, c.h);
        assertEquals(EngineConfig.OPT_ADAM, c.optimizer);
        assertEquals(15, c.rows());
        assertEquals(EngineConfig.DIRECTIONS_IID, c.directions);
        assertEquals(EngineConfig.NORMALISE_SPREAD, c.normalise);
        assertEquals(EngineConfig.CHECK_AT_UPDATE, c.checkAt);
        EngineConfig m = EngineConfig.fromRecipe(Recipe.shippedFallback(17), 4 * Math.sqrt(128));
        assertEquals(17, m.rows());
        assertEquals(EngineConfig.EST_FZOO, m.estimator);
        assertEquals(EngineConfig.OPT_ADAM, m.optimizer);
        assertEquals(EngineConfig.LR_CONSTANT, m.lrSchedule);
        assertEquals(4 * Math.sqrt(128), m.maxNorm, 1e-12);
        // the recipe's remaining fields are ZOConfig's defaults, i.e. the engine's
        assertEquals(c.beta1, m.beta1);
        assertEquals(c.beta2, m.beta2);
        assertEquals(c.adamEps, m.adamEps);
        assertEquals(c.lrMin, m.lrMin);
        assertEquals(c.minRelImprove, m.minRelImprove);
        assertEquals(c.directions, m.directions);
        assertEquals(c.normalise, m.normalise);
        assertEquals(EngineConfig.CHECK_AT_BASE, m.checkAt, "a bundle's check reads the step's row");
        try (NativeEngine e = new NativeEngine()) {
            e.configure(m, 128);  // the engine accepts it
            assertEquals(17, e.rows());
        }
    }

    @Test
    void coordinateDirectionsPerturbOneCoordinatePerRowAndConverge() {
        try (NativeEngine e = new NativeEngine()) {
            EngineConfig c = fzoo();
            c.directions = EngineConfig.DIRECTIONS_COORDINATES;
            c.lossTol = 0.05;
            e.configure(c, D);
            final int[] bad = {0};
            Quadratic q = new Quadratic();
            NativeEngine.Forward f = (deltas, rows, d, out) -> {
                for (int r = 1; r < rows; r++) {  // FZOO: row 0 = x, rows 1.. = x + h u_r
                    int changed = 0;
                    for (int i = 0; i < d; i++) {
                        changed += deltas[r * d + i] != deltas[i] ? 1 : 0;
                    }
                    bad[0] += changed == 1 ? 0 : 1;
                }
                q.forward(deltas, rows, d, out);
            };
            EngineStatus s = e.run(null, f, null);
            assertEquals(0, bad[0], "rows perturbing other than one coordinate");
            assertEquals(EngineStatus.SUCCESS_LOSS, s, "history " + java.util.Arrays.toString(e.history()));
        }
        EngineConfig bad = fzoo();
        bad.directions = 7;
        try (NativeEngine e = new NativeEngine()) {
            NativeEngineException ex = assertThrows(NativeEngineException.class, () -> e.configure(bad, D));
            assertTrue(ex.getMessage().contains("ZOConfig.directions"), ex.getMessage());
        }
    }

    /** FZOO on coordinates, n_dirs 2 of d 8, plain SGD: each step moves only its own coordinates. */
    static EngineConfig gradientScaled() {
        EngineConfig c = fzoo();
        c.nDirs = 2;
        c.optimizer = EngineConfig.OPT_SGD;
        c.momentum = 0;
        c.lr = 0.05;
        c.directions = EngineConfig.DIRECTIONS_COORDINATES;
        c.normalise = EngineConfig.NORMALISE_GRADIENT;
        c.lossTol = 0.1;
        return c;
    }

    /** The rows of every forward call, copied. */
    static final class Recorder implements NativeEngine.Forward {
        final java.util.List<float[]> calls = new java.util.ArrayList<>();
        final Quadratic q = new Quadratic();

        @Override
        public void forward(float[] deltas, int rows, int d, float[] out) {
            calls.add(java.util.Arrays.copyOf(deltas, rows * d));
            q.forward(deltas, rows, d, out);
        }
    }

    @Test
    void gradientNormaliseStepsOnlyTheMeasuredCoordinatesAndConverges() {
        Recorder rec = new Recorder();
        EngineStatus s;
        try (NativeEngine e = new NativeEngine()) {
            e.configure(gradientScaled(), D);
            assertEquals(3, e.rows());
            s = e.run(null, rec, null);
            assertEquals(EngineStatus.SUCCESS_LOSS, s, "history " + java.util.Arrays.toString(e.history()));
        }
        assertTrue(rec.calls.size() >= 2, "calls " + rec.calls.size());
        for (int k = 0; k + 1 < rec.calls.size(); k++) {
            float[] now = rec.calls.get(k);
            float[] next = rec.calls.get(k + 1);
            java.util.Set<Integer> measured = new java.util.HashSet<>();
            for (int r = 1; r < 3; r++) {  // FZOO: row 0 = x, rows 1.. = x + h u_r, one coordinate each
                for (int i = 0; i < D; i++) {
                    if (now[r * D + i] != now[i]) {
                        measured.add(i);
                    }
                }
            }
            assertEquals(2, measured.size(), "call " + k + " measures two coordinates");
            for (int i = 0; i < D; i++) {
                if (next[i] != now[i]) {
                    assertTrue(measured.contains(i), "call " + k + ": x moved at unmeasured coordinate " + i);
                }
            }
        }

        // the same seed with FZOO's own spread rule draws the same first batch, then steps otherwise
        Recorder spread = new Recorder();
        EngineConfig c = gradientScaled();
        c.normalise = EngineConfig.NORMALISE_SPREAD;
        try (NativeEngine e = new NativeEngine()) {
            e.configure(c, D);
            e.run(null, spread, null);
        }
        assertArrayEquals(rec.calls.get(0), spread.calls.get(0));
        assertNotEquals(java.util.Arrays.toString(rec.calls.get(1)), java.util.Arrays.toString(spread.calls.get(1)));

        // gradient is FZOO-on-coordinates only; an unknown value is refused too
        EngineConfig iid = gradientScaled();
        iid.directions = EngineConfig.DIRECTIONS_IID;
        EngineConfig paper = gradientScaled();
        paper.estimator = EngineConfig.EST_PAPER;
        EngineConfig unknown = gradientScaled();
        unknown.normalise = 7;
        for (EngineConfig bad : new EngineConfig[] {iid, paper, unknown}) {
            try (NativeEngine e = new NativeEngine()) {
                NativeEngineException ex = assertThrows(NativeEngineException.class, () -> e.configure(bad, D));
                assertTrue(ex.getMessage().contains("ZOConfig.normalise"), ex.getMessage());
            }
        }
        EngineConfig when = gradientScaled();
        when.checkAt = 2;
        try (NativeEngine e = new NativeEngine()) {
            NativeEngineException ex = assertThrows(NativeEngineException.class, () -> e.configure(when, D));
            assertTrue(ex.getMessage().contains("ZOConfig.check_at"), ex.getMessage());
        }
    }

    @Test
    void quadraticConvergesToLossTolerance() {
        try (NativeEngine e = new NativeEngine()) {
            EngineConfig c = fzoo();
            c.lossTol = 0.05;
            e.configure(c, D);
            assertEquals(17, e.rows());
            Quadratic q = new Quadratic();
            EngineStatus s = e.run(null, q, null);
            assertEquals(EngineStatus.SUCCESS_LOSS, s, "history " + java.util.Arrays.toString(e.history()));
            assertEquals(q.forwards, e.steps());
            assertEquals(17L * q.forwards, e.evals());
            double[] h = e.history();
            assertEquals(e.steps(), h.length);
            assertTrue(h[h.length - 1] < 0.05 && h[0] > 5, "loss fell from " + h[0] + " to " + h[h.length - 1]);
        }
    }

    @Test
    void checkCallbackStopsEarly() {
        try (NativeEngine e = new NativeEngine()) {
            e.configure(fzoo(), D);
            Quadratic q = new Quadratic();
            EngineStatus s = e.run(null, q, q);
            assertEquals(EngineStatus.SUCCESS_CHECK, s);
            assertTrue(s.isSuccess() && s.isDone());
            assertEquals(q.checks, e.checks());
            assertEquals(e.steps(), e.checks());
            assertTrue(Quadratic.loss(e.x(), 0) < 0.09);
        }
    }

    @Test
    void stepwiseEqualsRunBitForBit() {
        float[] xRun;
        double[] hRun;
        try (NativeEngine a = new NativeEngine()) {
            a.configure(fzoo(), D);
            a.run(null, new Quadratic(), new Quadratic());
            xRun = a.x();
            hRun = a.history();
        }
        try (NativeEngine b = new NativeEngine()) {
            b.configure(fzoo(), D);
            b.reset(null);
            Quadratic q = new Quadratic();
            EngineStatus s = EngineStatus.RUNNING;
            while (!s.isDone()) {
                s = b.step(q, q);
            }
            assertArrayEquals(xRun, b.x());
            assertArrayEquals(hRun, b.history());
            NativeEngineException again = assertThrows(NativeEngineException.class, () -> b.step(q, q));
            assertEquals(3, again.code());
        }
    }

    @Test
    void aThrowingCallbackEndsTheRunWithItsExceptionAsCause() {
        try (NativeEngine e = new NativeEngine()) {
            e.configure(fzoo(), D);
            IllegalStateException boom = new IllegalStateException("program failed");
            NativeEngineException ex = assertThrows(NativeEngineException.class,
                () -> e.run(null, (d, rows, dd, out) -> { throw boom; }, null));
            assertEquals(4, ex.code());
            assertSame(boom, ex.getCause());
            assertEquals(EngineStatus.ERROR, e.status());
            Quadratic q = new Quadratic();
            NativeEngineException ex2 = assertThrows(NativeEngineException.class,
                () -> e.run(null, q, (x, d) -> { throw new java.io.IOException("check io"); }));
            assertEquals("check io", ex2.getCause().getMessage());
        }
    }

    @Test
    void nonFiniteLossesAreAResultNotAnException() {
        try (NativeEngine e = new NativeEngine()) {
            e.configure(fzoo(), D);
            assertEquals(EngineStatus.NONFINITE, e.run(null, (d, rows, dd, out) -> out[0] = Float.NaN, null));
            // a callback that leaves rows unwritten gets NaN-prefilled losses -> NONFINITE as well
            assertEquals(EngineStatus.NONFINITE, e.run(null, (d, rows, dd, out) -> { }, null));
            assertEquals(0, e.history().length);
        }
    }

    @Test
    void configAndStateErrorsCarryTheEnginesMessage() {
        try (NativeEngine e = new NativeEngine()) {
            EngineConfig c = fzoo();
            c.nDirs = 0;
            NativeEngineException ex = assertThrows(NativeEngineException.class, () -> e.configure(c, D));
            assertEquals(2, ex.code());
            assertTrue(ex.getMessage().contains("n_dirs"), ex.getMessage());
            assertEquals(3, assertThrows(NativeEngineException.class, () -> e.reset(null)).code());
            assertEquals(-1, e.rows());
            e.configure(fzoo(), D);
            assertEquals(1, assertThrows(NativeEngineException.class, () -> e.reset(new float[3])).code());
            assertEquals(1, assertThrows(NativeEngineException.class, () -> e.step(null, null)).code());
        }
        NativeEngine closed = new NativeEngine();
        closed.close();
        closed.close();
        assertEquals(3, assertThrows(NativeEngineException.class, closed::rows).code());
    }

    @Test
    void startsFromAGivenPoint() {
        try (NativeEngine e = new NativeEngine()) {
            EngineConfig c = fzoo();
            c.lossTol = 1.0;
            e.configure(c, D);
            assertEquals(EngineStatus.SUCCESS_LOSS, e.run(TARGET.clone(), new Quadratic(), null));
            assertEquals(1, e.steps());
            assertArrayEquals(TARGET, e.x());
        }
    }

    @Test
    void rankOneFactors() {
        float[] k = {1f, 2f, -1f};
        float[] c = {0.5f, 1f, 0f};
        float[] v = {3f, 4f};
        float[] wk = {1f, 1.5f};
        float[] u = new float[2];
        float[] w = new float[3];
        NativeEngine.rankOne(k, v, wk, c, u, w);
        assertArrayEquals(new float[] {2f, 2.5f}, u);
        double ck = 0.5 * 1 + 1 * 2;
        assertArrayEquals(new float[] {(float) (0.5 / ck), (float) (1 / ck), 0f}, w, 1e-7f);
        NativeEngine.rankOne(k, v, wk, null, u, w);
        assertArrayEquals(new float[] {1f / 6, 2f / 6, -1f / 6}, w, 1e-7f);
        NativeEngineException ex = assertThrows(NativeEngineException.class,
            () -> NativeEngine.rankOne(new float[3], v, wk, null, new float[2], new float[3]));
        assertTrue(ex.code() == 5 || ex.code() == 1, "code " + ex.code());
        assertEquals(1, assertThrows(NativeEngineException.class,
            () -> NativeEngine.rankOne(k, v, new float[1], null, u, w)).code());
    }

    @Test
    void directionsAreTheEnginesCounterBasedDraws() {
        float[] a = NativeEngine.directions(0, 42, 3, 0, 4, 10);
        for (float x : a) {
            assertTrue(x == 1f || x == -1f);
        }
        assertArrayEquals(a, NativeEngine.directions(0, 42, 3, 0, 4, 10));
        assertNotEquals(java.util.Arrays.toString(a), java.util.Arrays.toString(NativeEngine.directions(0, 42, 4, 0, 4, 10)));
        float[] g = NativeEngine.directions(1, 0, 0, 0, 1, 8);
        double s = 0;
        for (float x : g) {
            s += x * x;
        }
        assertTrue(s > 0);
        assertEquals(1, assertThrows(NativeEngineException.class, () -> NativeEngine.directions(7, 0, 0, 0, 1, 1)).code());
    }
}
