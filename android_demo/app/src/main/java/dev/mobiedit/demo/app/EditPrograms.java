package dev.mobiedit.demo.app;

import dev.mobiedit.demo.core.EditPack;

/**
 * The bundle's forward-only edit graph: the prefix program (once per edit) and the edit program
 * (K value deltas in, K losses + per-prompt correctness out). On the phone this is
 * {@link BundlePrograms} over ExecuTorch ({@code runtime.ExecuTorchRuntime}); in the JVM tests a
 * Java objective stands in.
 */
public interface EditPrograms {
    /** Run the prefix program on the edit's packed batch with the current rank-one slots. */
    PrefixState prefix(EditPack pack, float[] slotU, float[] slotW) throws Exception;

    /**
     * Run the edit program on {@code deltas} [batchRows(), d] (value deltas added to the edit
     * layer's output at the subject's last token); write {@code lossesOut} [batchRows()] and
     * {@code correctOut} [batchRows() * nRewrite] (how many target tokens are the argmax in each
     * rewrite prompt: an exact integer; target_len = the edit holds there).
     */
    void edit(PrefixState state, float[] deltas, float[] lossesOut, float[] correctOut)
        throws Exception;

    /** Static rows per edit-program call (manifest shapes.edit_K). */
    int batchRows();
}
