package dev.mobiedit.demo.core;

/**
 * One edit's prompt batch, the input of the bundle's prefix program (mobiedit.editing.context
 * EditInputs / mobiedit.prompts.TargetBatch): rows [0, nRewrite) are the context-templated
 * rewrite prompts followed by the new answer minus its last token, the remaining rows the KL
 * prompt (the bundle's edit.objective.kl_prompt, ROME's "{subject} is a"). All int arrays are row-major [rows, width], right-padded to the
 * longest row (width), exactly like build_edit_inputs; {@link EditPack} pads them to the programs'
 * static shapes.
 */
public final class EditBatch {
    public final int rows;
    public final int width;
    /** Token ids, the bundle's pad id after each row's end. */
    public final long[] inputIds;
    /** 1 for real tokens, 0 for padding. */
    public final long[] attentionMask;
    /** Index of the subject's last token in each row. */
    public final long[] subjectIdx;
    /** Index of each row's last real token. */
    public final long[] lastIdx;
    /** Target token at the position that predicts it, -100 elsewhere. */
    public final long[] labels;
    public final int nRewrite;
    /** Tokens of " " + target_new. */
    public final int targetLen;

    EditBatch(int rows, int width, long[] inputIds, long[] attentionMask, long[] subjectIdx,
            long[] lastIdx, long[] labels, int nRewrite, int targetLen) {
        this.rows = rows;
        this.width = width;
        this.inputIds = inputIds;
        this.attentionMask = attentionMask;
        this.subjectIdx = subjectIdx;
        this.lastIdx = lastIdx;
        this.labels = labels;
        this.nRewrite = nRewrite;
        this.targetLen = targetLen;
    }

    /** Largest subject index (the prefix length P of the edit's state, packing.suffix_geometry). */
    public int prefixLength() {
        long p = 0;
        for (long s : subjectIdx) {
            p = Math.max(p, s);
        }
        return (int) p;
    }

    /** Positions from the subject's last token to the row end, max over rows (suffix S). */
    public int suffixLength() {
        long s = 0;
        for (int r = 0; r < rows; r++) {
            s = Math.max(s, lastIdx[r] - subjectIdx[r] + 1);
        }
        return (int) s;
    }

    /** Target read-outs: one per target token of each rewrite row. */
    public int targetReadouts() {
        return nRewrite * targetLen;
    }

    /** KL rows (each has one KL read-out at its last token). */
    public int klRows() {
        return rows - nRewrite;
    }
}
