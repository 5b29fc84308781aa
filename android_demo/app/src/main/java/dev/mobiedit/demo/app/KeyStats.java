package dev.mobiedit.demo.app;

import dev.mobiedit.demo.core.Files2;
import dev.mobiedit.demo.core.MobiEditError;
import dev.mobiedit.demo.core.Safetensors;
import dev.mobiedit.demo.core.Tensor;
import java.io.File;
import java.io.IOException;

/**
 * keystats.safetensors: {@code c_inv} [d_in, d_in], the inverse second moment of the edit
 * layer's keys with the ridge applied. {@link #solve} gives c = C^-1 k̄ (float64 accumulation),
 * the direction of ROME's rank-one update.
 */
public final class KeyStats {
    public static final String FILE = "keystats.safetensors";
    private final float[] cInv;
    private final int dIn;

    KeyStats(float[] cInv, int dIn) {
        this.cInv = cInv;
        this.dIn = dIn;
    }

    /** Read and check {@code bundle}/keystats.safetensors for keys of length {@code dIn}. */
    public static KeyStats open(File bundle, int dIn) {
        File f = new File(bundle, FILE);
        String where = f.getPath();
        try {
            Tensor t = Safetensors.parse(Files2.read(f), where).get("c_inv", where);
            long[] s = t.shape();
            if (s.length != 2 || s[0] != dIn || s[1] != dIn) {
                throw new MobiEditError("c_inv has shape " + java.util.Arrays.toString(s)
                    + ", expected [" + dIn + ", " + dIn + "]", where,
                    "re-export the bundle (dims.intermediate_size and keystats disagree)");
            }
            return new KeyStats(t.floats(), dIn);
        } catch (IOException e) {
            throw new MobiEditError("cannot read (" + e.getMessage() + ")", where,
                "copy the whole bundle again", e);
        }
    }

    /** An identity C^-1 (no covariance adjustment: c = k̄), for tests. */
    public static KeyStats identity(int dIn) {
        float[] eye = new float[dIn * dIn];
        for (int i = 0; i < dIn; i++) {
            eye[i * dIn + i] = 1f;
        }
        return new KeyStats(eye, dIn);
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
