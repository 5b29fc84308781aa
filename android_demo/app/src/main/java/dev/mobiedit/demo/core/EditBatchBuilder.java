package dev.mobiedit.demo.core;

import java.util.ArrayList;
import java.util.List;

/**
 * Builds the {@link EditBatch} of a request exactly as mobiedit.rome.context.build_edit_inputs
 * and mobiedit.prompts.make_batch do (ROME's conventions: target tokenised as " " + target
 * without special tokens, prompt with BOS, subject index = tokens of the prompt up to the subject
 * end, minus 1), then checks it fits the bundle's static edit shapes.
 */
public final class EditBatchBuilder {
    /** The KL prompt of ROME's objective (ObjectiveConfig.kl_prompt). */
    public static final String KL_PROMPT = "{} is a";

    private EditBatchBuilder() {
    }

    /**
     * The batch for {@code req} with the rewrite prompt in each of {@code templates} (each holds
     * one "{}"), padded to the program's {@code width} = shapes.edit_prefix + edit_suffix.
     */
    public static EditBatch build(ByteLevelBpe tok, EditRequest req, List<String> templates,
            Manifest.Shapes shapes, int padId) {
        if (templates.size() + 1 != shapes.editRows) {
            throw new MobiEditError(templates.size() + " context templates + 1 KL prompt != "
                + shapes.editRows + " rows", "manifest.json, field 'shapes.edit_rows'",
                "regenerate the context templates for this bundle");
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
        String kl = KL_PROMPT.replace(EditRequest.SLOT, req.subject);
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
        return pack(ids, labels, subj, templates.size(), target.length, shapes, padId);
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
            int nRewrite, int targetLen, Manifest.Shapes shapes, int padId) {
        int rows = ids.size();
        int width = shapes.editTokens();
        long[] x = new long[rows * width];
        long[] m = new long[rows * width];
        long[] y = new long[rows * width];
        long[] s = new long[rows];
        long[] last = new long[rows];
        for (int r = 0; r < rows; r++) {
            long[] row = ids.get(r);
            if (row.length > width) {
                throw tooLong("edit_prefix + edit_suffix", width, row.length);
            }
            for (int c = 0; c < width; c++) {
                boolean real = c < row.length;
                x[r * width + c] = real ? row[c] : padId;
                m[r * width + c] = real ? 1 : 0;
                y[r * width + c] = real ? labels.get(r)[c] : -100;
            }
            s[r] = subj.get(r);
            last[r] = row.length - 1;
        }
        EditBatch b = new EditBatch(rows, width, x, m, s, last, y, nRewrite, targetLen);
        if (b.prefixLength() > shapes.editPrefix) {
            throw tooLong("edit_prefix", shapes.editPrefix, b.prefixLength());
        }
        if (b.suffixLength() > shapes.editSuffix) {
            throw tooLong("edit_suffix", shapes.editSuffix, b.suffixLength());
        }
        if (b.readouts() > shapes.editReadouts) {
            throw new MobiEditError("the new answer is " + targetLen + " tokens: " + b.readouts()
                + " loss read-outs > " + shapes.editReadouts,
                "manifest.json, field 'shapes.edit_readouts'",
                "use a shorter answer, or re-export the bundle with more read-outs");
        }
        return b;
    }

    private static MobiEditError tooLong(String field, int limit, int need) {
        return new MobiEditError("this edit needs " + need + " positions, the bundle's edit "
            + "program has " + limit, "manifest.json, field 'shapes." + field + "'",
            "use a shorter subject, prompt or answer, or re-export the bundle with larger shapes");
    }

    private static String rstrip(String s) {
        int end = s.length();
        while (end > 0 && Character.isWhitespace(s.charAt(end - 1))) {
            end--;
        }
        return s.substring(0, end);
    }
}
