package dev.mobiedit.demo.core;

/**
 * Next-token logits of the on-device model (the bundle's prefill + decode programs with the
 * current rank-one slots). Implementations are not thread-safe.
 */
public interface LanguageModel {
    /** Forget any previous sequence, run {@code ids} and return the logits [vocab] after it. */
    float[] start(int[] ids) throws Exception;

    /** Append {@code id} to the sequence and return the logits after it. */
    float[] next(int id) throws Exception;

    /** Longest sequence the programs accept (shapes.max_seq_len). */
    int maxLength();
}
