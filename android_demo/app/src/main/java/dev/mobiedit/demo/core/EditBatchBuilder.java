package dev.mobiedit.demo.core;

import java.util.ArrayList;
import java.util.List;

/**
 * Builds the {@link EditBatch} of a request exactly as mobiedit.editing.context.build_edit_inputs
 * and mobiedit.prompts.make_batch do (ROME's conventions: target tokenised as " " + target
 * without special tokens, prompt with BOS, subject index = tokens of the prompt up to the subject
 * end, minus 1; rows right-padded to the longest one). Fitting the batch to the programs' static
 * shapes is {@link EditPack}'s job (mobiedit.export.packing.pack_edit).
 */
public final class EditBatchBuilder {
    /** ROME's KL prompt (ObjectiveConfig.kl_prompt); bundles carry theirs in edit.objective. */
    public static final String KL_PROMPT = "{} is a";

    private EditBatchBuilder() {
    }

    /**
     * The batch for {@code req}: the rewrite prompt in each of {@code templates} (each holds one
     * "{}") followed by the new answer minus its last token, then {@code klPrompt} with the
     * subject; rows padded with {@code padId} to the longest row.
     */
    public static EditBatch build(ByteLevelBpe tok, EditRequest req, List<String> templates,
            String klPrompt, int padId) {
        if (templates.isEmpty()) {
            throw ManifestFields.err("edit.templates", "no context templates",
                ManifestFields.REEXPORT);
        }
        int[] target = tok.encode(" " + req.targetNew.trim(), false);
        if (target.length == 0) {
            throw new MobiEditError("tokenises to nothing", "edit form, field 'New answer'",
                "use a non-empty answer");
        }
        List<long[]> ids = new ArrayList<long[]>();
        List<long[]> labels = new ArrayList<long[]>();
        List<Long> subj = new ArrayList<Long>();
        String rewrite = req.rewritePrompt();
        for (String t : templates) {
            String p = t.replace(EditRequest.SLOT, rewrite);
            int[] pid = tok.encode(p, true);
            long[] row = new long[pid.length + target.length - 1];
            long[] lab = new long[row.length];
            for (int i = 0; i < row.length; i++) {
                row[i] = i < pid.length ? pid[i] : target[i - pid.length];
                lab[i] = -100;
            }
            for (int j = 0; j < target.length; j++) {
                lab[pid.length - 1 + j] = target[j];
            }
            ids.add(row);
            labels.add(lab);
            subj.add((long) subjectLastIndex(tok, p, req.subject));
        }
        String kl = klPrompt.replace(EditRequest.SLOT, req.subject);
        int[] kid = tok.encode(kl, true);
        long[] klRow = new long[kid.length];
        long[] klLab = new long[kid.length];
        for (int i = 0; i < kid.length; i++) {
            klRow[i] = kid[i];
            klLab[i] = -100;
        }
        ids.add(klRow);
        labels.add(klLab);
        subj.add((long) subjectLastIndex(tok, kl, req.subject));
        return pack(ids, labels, subj, templates.size(), target.length, padId);
    }

    /**
     * Refuse an edit whose subject is the first token of its prompt (mobiedit.prompts.
     * subject_context_error): a tokenizer without BOS puts it at position 0, the model's attention
     * sink, where no rank-one edit holds without disturbing every text.
     */
    public static void checkSubjectContext(ByteLevelBpe tok, EditRequest req) {
        String prompt = req.rewritePrompt();
        if (subjectLastIndex(tok, prompt, req.subject) == 0) {
            throw new MobiEditError("the subject '" + req.subject + "' is the first token of the prompt '"
                + prompt + "' and the tokenizer adds no BOS: an edit keyed at position 0 (the model's"
                + " attention sink) does not hold and disturbs every text", "edit form, field 'Prompt'",
                "reword the prompt so that words come before the subject (e.g. \"The capital city of"
                + " X is\" rather than \"X's capital city is\")");
        }
    }

    /** ROME's subject index: tokens of {@code text} up to the subject's end (rstripped) - 1. */
    static int subjectLastIndex(ByteLevelBpe tok, String text, String subject) {
        int i = text.indexOf(subject);
        if (i < 0) {
            throw new MobiEditError("subject '" + subject + "' does not occur in prompt '" + text
                + "'", "field 'subject'", "make the prompt contain the subject verbatim");
        }
        String head = rstrip(text.substring(0, i + subject.length()));
        return tok.encode(head, true).length - 1;
    }

    private static EditBatch pack(List<long[]> ids, List<long[]> labels, List<Long> subj,
            int nRewrite, int targetLen, int padId) {
        int rows = ids.size();
        int width = 0;
        for (long[] row : ids) {
            width = Math.max(width, row.length);
        }
        long[] x = new long[rows * width];
        long[] m = new long[rows * width];
        long[] y = new long[rows * width];
        long[] s = new long[rows];
        long[] last = new long[rows];
        for (int r = 0; r < rows; r++) {
            long[] row = ids.get(r);
            for (int c = 0; c < width; c++) {
                boolean real = c < row.length;
                x[r * width + c] = real ? row[c] : padId;
                m[r * width + c] = real ? 1 : 0;
                y[r * width + c] = real ? labels.get(r)[c] : -100;
            }
            s[r] = subj.get(r);
            last[r] = row.length - 1;
        }
        return new EditBatch(rows, width, x, m, s, last, y, nRewrite, targetLen);
    }

    private static String rstrip(String s) {
        int end = s.length();
        while (end > 0 && Character.isWhitespace(s.charAt(end - 1))) {
            end--;
        }
        return s.substring(0, end);
    }
}
