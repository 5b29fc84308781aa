package dev.mobiedit.demo.app;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.Random;
import org.junit.jupiter.api.Test;

/**
 * The protecting write rules in the app (mobiedit.editing.update.protected_solve /
 * bundle_direction): the Woodbury solve from the shipped C^-1 solves the normal matrix
 * C + w K_p^T K_p, the direction is ROME's / "rows"' without applied keys, "rows-protect" stays
 * exact at every rewrite key, and the applied keys move less.
 */
class ProtectRuleTest {
    static final int D = 12;

    /** A symmetric positive definite C^-1 = M (row-major), M = A A^T / D + 0.2 I. */
    static float[] spd(Random r) {
        double[][] a = new double[D][D];
        for (double[] row : a) {
            for (int j = 0; j < D; j++) {
                row[j] = r.nextGaussian();
            }
        }
        float[] m = new float[D * D];
        for (int i = 0; i < D; i++) {
            for (int j = 0; j < D; j++) {
                double acc = i == j ? 0.2 : 0;
                for (int t = 0; t < D; t++) {
                    acc += a[i][t] * a[j][t] / D;
                }
                m[i * D + j] = (float) acc;
            }
        }
        return m;
    }

    static float[][] gaussian(Random r, int n, double shift) {
        float[][] out = new float[n][D];
        for (float[] row : out) {
            for (int j = 0; j < D; j++) {
                row[j] = (float) (r.nextGaussian() + shift);
            }
        }
        return out;
    }

    static double[] times(float[] m, double[] x) {
        double[] out = new double[D];
        for (int i = 0; i < D; i++) {
            for (int j = 0; j < D; j++) {
                out[i] += m[i * D + j] * x[j];
            }
        }
        return out;
    }

    static double dot(float[] a, float[] b) {
        double acc = 0;
        for (int i = 0; i < a.length; i++) {
            acc += (double) a[i] * b[i];
        }
        return acc;
    }

    @Test
    void theWoodburySolveSolvesTheProtectedNormalMatrix() {
        Random r = new Random(7);
        float[] m = spd(r);
        KeyStats ks = new KeyStats(m, D, null);
        float[][] prior = gaussian(r, 4, 0);
        float[] k = gaussian(r, 1, 0.3)[0];
        double weight = 3.0;
        float[] x = ks.protectDirection(k, prior, weight);
        // (C + w K^T K) x = k  <=>  x + w M K^T (K x) = M k, with M = C^-1
        double[] kt = new double[D];
        for (float[] kp : prior) {
            double s = dot(kp, x);
            for (int i = 0; i < D; i++) {
                kt[i] += weight * kp[i] * s;
            }
        }
        double[] lhs = times(m, kt);
        double[] kd = new double[D];
        for (int i = 0; i < D; i++) {
            kd[i] = k[i];
        }
        double[] rhs = times(m, kd);
        for (int i = 0; i < D; i++) {
            assertEquals(rhs[i], x[i] + lhs[i], 1e-4 * (1 + Math.abs(rhs[i])), "row " + i);
        }
        assertArrayEquals(ks.solve(k), ks.protectDirection(k, new float[0][], weight));
        assertArrayEquals(ks.solve(k), ks.protectDirection(k, null, weight));
    }

    @Test
    void rowsProtectStaysExactAtEveryRewriteKeyAndMovesTheAppliedKeysLess() {
        Random r = new Random(11);
        KeyStats ks = new KeyStats(spd(r), D, null);
        float[] base = gaussian(r, 1, 0.5)[0];
        int n = 3;
        float[] keys = new float[n * D];
        for (int j = 0; j < n; j++) {
            for (int i = 0; i < D; i++) {
                keys[j * D + i] = base[i] + 0.3f * (float) r.nextGaussian();
            }
        }
        float[][] prior = gaussian(r, 3, 0);
        float[] plain = ks.rowsDirection(keys, n, 1e-6);
        assertArrayEquals(plain, ks.rowsDirection(keys, n, 1e-6, new float[0][], 1.0));
        float[] held = ks.rowsDirection(keys, n, 1e-6, prior, 50.0);
        for (int j = 0; j < n; j++) {
            float[] kj = java.util.Arrays.copyOfRange(keys, j * D, (j + 1) * D);
            assertEquals(1.0, dot(kj, held), 1e-3, "rewrite key " + j);
        }
        double movedPlain = 0;
        double movedHeld = 0;
        for (float[] kp : prior) {
            movedPlain += dot(kp, plain) * dot(kp, plain);
            movedHeld += dot(kp, held) * dot(kp, held);
        }
        assertTrue(movedHeld < 0.25 * movedPlain, movedHeld + " vs " + movedPlain);
    }
}
