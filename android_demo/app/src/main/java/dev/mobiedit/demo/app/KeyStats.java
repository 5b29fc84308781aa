package dev.mobiedit.demo.app;

import dev.mobiedit.demo.core.Files2;
import dev.mobiedit.demo.core.MobiEditError;
import dev.mobiedit.demo.core.Safetensors;
import dev.mobiedit.demo.core.Tensor;
import java.io.File;
import java.io.IOException;

/**
 * keystats.safetensors (docs/bundle_format.md): {@code c_inv_triu} [d_in(d_in+1)/2], the upper
 * triangle (row-major, diagonal included) of the symmetric inverse second moment of the edit
 * layer's keys with the ridge applied (export/bundle.py pack_symmetric), and {@code base_weight},
 * the edit module's weight as exported (its own layout). {@link #solve} gives c = C^-1 k̄
 * (float64 accumulation), the direction of ROME's rank-one update; {@link #baseWeight} is what
 * the journal's first edit records as the module's base.
 */
public final class KeyStats {
    public static final String FILE = "keystats.safetensors";
    private final float[] cInv;
    private final int dIn;
    private final Tensor baseWeight;

    KeyStats(float[] cInv, int dIn, Tensor baseWeight) {
        this.cInv = cInv;
        this.dIn = dIn;
        this.baseWeight = baseWeight;
    }

    /**
     * Read and check {@code bundle}/keystats.safetensors for keys of length {@code dIn} and a
     * base weight of {@code dOut * dIn} values.
     */
    public static KeyStats open(File bundle, int dIn, int dOut) {
        File f = new File(bundle, FILE);
        String where = f.getPath();
        try {
            Safetensors.Contents c = Safetensors.parse(Files2.read(f), where);
            Tensor t = c.get("c_inv_triu", where);
            long[] s = t.shape();
            long n = (long) dIn * (dIn + 1) / 2;
            if (s.length != 1 || s[0] != n) {
                throw new MobiEditError("c_inv_triu has shape " + java.util.Arrays.toString(s)
                    + ", expected [" + n + "] (d_in = " + dIn + ")", where,
                    "re-export the bundle (dims.intermediate_size and keystats disagree)");
            }
            Tensor base = c.get("base_weight", where);
            if (base.shape().length != 2 || base.numel() != (long) dIn * dOut) {
                throw new MobiEditError("base_weight has shape "
                    + java.util.Arrays.toString(base.shape()) + ", expected " + dOut + " x " + dIn,
                    where, "re-export the bundle (dims and keystats disagree)");
            }
            return new KeyStats(unpack(t.floats(), dIn), dIn, base);
        } catch (IOException e) {
            throw new MobiEditError("cannot read (" + e.getMessage() + ")", where,
                "copy the whole bundle again", e);
        }
    }

    /** The full symmetric [n, n] matrix of its upper triangle (export/bundle.py unpack_symmetric). */
    static float[] unpack(float[] triu, int n) {
        float[] out = new float[n * n];
        int k = 0;
        for (int i = 0; i < n; i++) {
            for (int j = i; j < n; j++) {
                out[i * n + j] = triu[k];
                out[j * n + i] = triu[k];
                k++;
            }
        }
        return out;
    }

    /** An identity C^-1 (no covariance adjustment: c = k̄) and no base weight, for tests. */
    public static KeyStats identity(int dIn) {
        float[] eye = new float[dIn * dIn];
        for (int i = 0; i < dIn; i++) {
            eye[i * dIn + i] = 1f;
        }
        return new KeyStats(eye, dIn, null);
    }

    /** The edit module's exported weight (safetensors name "base_weight"), or null in tests. */
    public Tensor baseWeight() {
        return baseWeight;
    }

    /**
     * The "rows" write rule's direction (docs/zo_spec.md §5; mobiedit.editing.update.rows_combine,
     * the same arithmetic): for the keys K [n, d_in] (row-major {@code keys}), CK = C^-1 K^T,
     * G = K CK, rho = ridge * mean(diag G), (G + rho I) a = 1 solved with partial pivoting in
     * double, c = CK a — the direction that is 1 at every key with the least C-norm.
     */
    public float[] rowsDirection(float[] keys, int n, double ridge) {
        return rowsDirection(keys, n, ridge, null, 1.0);
    }

    /**
     * {@link #rowsDirection} with C + weight K_p^T K_p for C ("rows-protect"; {@code prior}
     * [n_p][d_in] the active edits' keys, null or empty: "rows"), through {@link #protectedSolve}.
     */
    public float[] rowsDirection(float[] keys, int n, double ridge, float[][] prior, double weight) {
        if (n < 1 || keys == null || keys.length != n * dIn) {
            throw new MobiEditError("rows rule: " + n + " keys of " + dIn + " do not match "
                + (keys == null ? "none" : keys.length + " values"), "KeyStats.rowsDirection",
                "pass the prefix program's rewrite-row keys");
        }
        double[][] kt = new double[n][dIn];
        for (int j = 0; j < n; j++) {
            for (int i = 0; i < dIn; i++) {
                kt[j][i] = keys[j * dIn + i];
            }
        }
        double[][] ck = protectedSolve(kt, prior, weight); // C^-1 K^T in double, as bundle_direction
        double[][] g = new double[n][n + 1];
        double trace = 0;
        for (int a = 0; a < n; a++) {
            for (int b = 0; b < n; b++) {
                double acc = 0;
                for (int t = 0; t < dIn; t++) {
                    acc += (double) keys[a * dIn + t] * ck[b][t];
                }
                g[a][b] = acc;
            }
            trace += g[a][a];
        }
        double rho = ridge * trace / n;
        for (int a = 0; a < n; a++) {
            g[a][a] += rho;
            g[a][n] = 1.0;
        }
        double[] x = solve(g, n, "the template keys' Gram matrix is singular");
        float[] out = new float[dIn];
        for (int i = 0; i < dIn; i++) {
            double acc = 0;
            for (int j = 0; j < n; j++) {
                acc += ck[j][i] * x[j];
            }
            if (Double.isNaN(acc) || Double.isInfinite(acc)) {
                throw new MobiEditError("non-finite direction from the template keys",
                    "edit.update.rule rows", "re-export with a larger rows_ridge, or rule 'rome'");
            }
            out[i] = (float) acc;
        }
        return out;
    }

    /** Gaussian elimination with partial pivoting of the augmented system {@code m} [n, n + 1]. */
    private static double[] solve(double[][] m, int n, String singular) {
        for (int col = 0; col < n; col++) {
            int piv = col;
            for (int r = col + 1; r < n; r++) {
                if (Math.abs(m[r][col]) > Math.abs(m[piv][col])) {
                    piv = r;
                }
            }
            double[] tmp = m[col];
            m[col] = m[piv];
            m[piv] = tmp;
            if (m[col][col] == 0) {
                throw new MobiEditError(singular, "edit.update.rule",
                    "re-export with a larger rows_ridge or edited_weight, or rule 'rome'");
            }
            for (int r = col + 1; r < n; r++) {
                double f = m[r][col] / m[col][col];
                for (int c = col; c <= n; c++) {
                    m[r][c] -= f * m[col][c];
                }
            }
        }
        double[] x = new double[n];
        for (int r = n - 1; r >= 0; r--) {
            double acc = m[r][n];
            for (int c = r + 1; c < n; c++) {
                acc -= m[r][c] * x[c];
            }
            x[r] = acc / m[r][r];
        }
        return x;
    }

    /**
     * The "protect" rule's direction (mobiedit.editing.update.bundle_direction): (C + weight
     * K_p^T K_p)^-1 k̄ for the active edits' keys {@code prior}; C^-1 k̄ ({@link #solve}) when
     * there are none.
     */
    public float[] protectDirection(float[] kBar, float[][] prior, double weight) {
        if (prior == null || prior.length == 0) {
            return solve(kBar);
        }
        double[][] x = new double[1][dIn];
        for (int i = 0; i < dIn; i++) {
            x[0][i] = kBar[i];
        }
        double[] c = protectedSolve(x, prior, weight)[0];
        float[] out = new float[dIn];
        for (int i = 0; i < dIn; i++) {
            out[i] = (float) c[i];
        }
        return out;
    }

    /**
     * (C + weight K_p^T K_p)^-1 x_j for each row x_j [d_in] of {@code x}, from the shipped C^-1 by
     * the Woodbury identity (mobiedit.editing.update.protected_solve, the same arithmetic in
     * double): C^-1 x - A (I / weight + K_p A)^-1 A^T x with A = C^-1 K_p^T. {@code prior} null or
     * empty: C^-1 x.
     */
    double[][] protectedSolve(double[][] x, float[][] prior, double weight) {
        double[][] cx = cInvTimes(x);
        int np = prior == null ? 0 : prior.length;
        if (np == 0) {
            return cx;
        }
        double[][] kp = new double[np][];
        for (int p = 0; p < np; p++) {
            if (prior[p] == null || prior[p].length != dIn) {
                throw new MobiEditError("applied edit key " + p + " is not of length " + dIn,
                    "KeyStats.protectedSolve", "pass the journal's protected keys");
            }
            kp[p] = new double[dIn];
            for (int i = 0; i < dIn; i++) {
                kp[p][i] = prior[p][i];
            }
        }
        double[][] a = cInvTimes(kp); // a[p] = C^-1 k_p (column p of A)
        for (int j = 0; j < x.length; j++) {
            double[][] s = new double[np][np + 1];
            for (int p = 0; p < np; p++) {
                for (int q = 0; q < np; q++) {
                    s[p][q] = dot(kp[p], a[q]) + (p == q ? 1.0 / weight : 0.0);
                }
                s[p][np] = dot(a[p], x[j]); // A^T x_j
            }
            double[] y = solve(s, np, "the applied edits' keys make a singular system");
            for (int i = 0; i < dIn; i++) {
                double acc = 0;
                for (int p = 0; p < np; p++) {
                    acc += a[p][i] * y[p];
                }
                cx[j][i] -= acc;
            }
        }
        return cx;
    }

    private double[][] cInvTimes(double[][] x) {
        double[][] out = new double[x.length][dIn];
        for (int j = 0; j < x.length; j++) {
            for (int i = 0; i < dIn; i++) {
                double acc = 0;
                int row = i * dIn;
                for (int t = 0; t < dIn; t++) {
                    acc += (double) cInv[row + t] * x[j][t];
                }
                out[j][i] = acc;
            }
        }
        return out;
    }

    private static double dot(double[] a, double[] b) {
        double acc = 0;
        for (int i = 0; i < a.length; i++) {
            acc += a[i] * b[i];
        }
        return acc;
    }

    /** C^-1 k [d_in]. */
    public float[] solve(float[] k) {
        float[] out = new float[dIn];
        for (int i = 0; i < dIn; i++) {
            double acc = 0;
            int row = i * dIn;
            for (int j = 0; j < dIn; j++) {
                acc += (double) cInv[row + j] * k[j];
            }
            out[i] = (float) acc;
        }
        return out;
    }
}
