package dev.mobiedit.demo.core;

import java.util.Arrays;
import java.util.List;

/**
 * The key cache of a bundle's journal: each bundle edit's key k̄ is kept in its factors file as
 * "k" ({@link Journal#record} with a key; mobiedit/journal.py record(key=), load_key), and the
 * protecting write rules ("protect", "rows-protect") hold the active edits' keys still.
 */
public final class JournalKeys {
    private JournalKeys() {
    }

    /**
     * The key "k" [d_in] recorded with an entry (mobiedit/journal.py load_key), after checking
     * sha256, dtype, shape and values; null when the entry was recorded without one.
     */
    public static float[] load(Journal j, JournalEntry e) {
        String where = j.journalPath() + ", edit " + e.id;
        Safetensors.Contents c = j.parseFactors(e, where);
        Tensor t = c.tensors.get("k");
        if (t == null) {
            return null;
        }
        long[] shape = t.shape();
        float[] k = "F32".equals(t.dtype) && shape.length == 1 && shape[0] == e.dIn ? t.floats() : null;
        if (k == null || !finite(k)) {
            throw new MobiEditError("key 'k' is " + t.dtype + Arrays.toString(shape)
                + " or non-finite, expected finite float32[" + e.dIn + "]", where + ", field 'k'", JournalEntry.RESTORE);
        }
        return k;
    }

    /**
     * [n_active][d_in] the keys recorded with the active edits, in id order (export/bundle.py
     * Bundle.protected_keys): what the protecting write rules hold still. An active entry
     * recorded without its key is refused by name.
     */
    public static float[][] active(Journal j) {
        List<JournalEntry> act = j.active();
        float[][] out = new float[act.size()][];
        for (int i = 0; i < out.length; i++) {
            JournalEntry e = act.get(i);
            out[i] = load(j, e);
            if (out[i] == null) {
                throw new MobiEditError("edit " + e.id + " was recorded without its key, which the "
                    + "bundle's write rule holds still", j.journalPath(), "undo edit " + e.id
                    + ", or use a bundle exported with --update-rule rome or rows");
            }
        }
        return out;
    }

    private static boolean finite(float[] v) {
        for (float x : v) {
            if (Float.isNaN(x) || Float.isInfinite(x)) {
                return false;
            }
        }
        return true;
    }
}
