package dev.mobiedit.demo.app;

import dev.mobiedit.demo.core.LanguageModel;

/** The loaded programs of one bundle. Not thread-safe: one worker thread uses it. */
public interface ModelRuntime {
    /** Chat model (prefill + decode) using the slots of the last {@link #setSlots} call. */
    LanguageModel chat();

    /** Prefix + edit programs. */
    EditPrograms edit();

    /** Rank-one slot inputs of the inference programs: u [slots*d_out], w [slots*d_in]. */
    void setSlots(float[] slotU, float[] slotW);

    /** Release the programs. */
    void close();

    /** Creates the runtime of a verified bundle. */
    interface Factory {
        ModelRuntime open(java.io.File bundleDir, dev.mobiedit.demo.core.Manifest manifest)
            throws Exception;
    }
}
