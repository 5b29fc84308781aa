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
