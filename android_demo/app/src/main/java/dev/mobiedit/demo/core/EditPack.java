package dev.mobiedit.demo.core;

import java.util.ArrayList;
import java.util.Collections;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/**
 * One edit's prompt batch padded to the programs' static shapes: the Java port of
 * mobiedit.export.packing.pack_edit (with mobiedit.forward.prefix.suffix_geometry, readouts and
 * build_mask). {@link #prefixFeed} holds the prefix program's inputs except the slots,
 * {@link #staticFeed} the edit program's delta-independent inputs except the prefix program's
 * outputs and wd_scale (the names are the programs' input names: the KL read-outs are
 * {@code kl_index} = flat b*N + last_b in the prefix feed and {@code kl_suffix_index} = flat
 * b*S + j in the edit feed). Padding never changes a loss: padded rows see one zero key,
 * padded read-outs carry weight 0.
 */
public final class EditPack {
    /** Real prompt rows (rows >= nRows are padding). */
    public final int nRows;
    public final int nRewrite;
    public final int targetLen;
    public final Manifest.Shapes shapes;
    public final Manifest.Objective objective;
    private final Map<String, HostTensor> prefixFeed;
    private final Map<String, HostTensor> staticFeed;

    private EditPack(int nRows, int nRewrite, int targetLen, Manifest.Shapes shapes,
            Manifest.Objective objective, Map<String, HostTensor> prefixFeed,
            Map<String, HostTensor> staticFeed) {
        this.nRows = nRows;
        this.nRewrite = nRewrite;
        this.targetLen = targetLen;
        this.shapes = shapes;
        this.objective = objective;
        this.prefixFeed = Collections.unmodifiableMap(prefixFeed);
        this.staticFeed = Collections.unmodifiableMap(staticFeed);
    }

    /** input_ids [B, N], suffix_pos [B, S], subject_pos [B], kl_index [R_kl] (int64). */
    public Map<String, HostTensor> prefixFeed() {
        return prefixFeed;
    }

    /**
     * mask [B, 1, S, P+S] int64 (1 = may attend, 0 = hidden), target_index / target_label [R_t]
     * int64, target_weight [R_t], target_rows [R_t, B] (1 at the read-out's row, so the edit
     * program's {@code correct} counts each row's argmax targets), kl_suffix_index [R_kl] int64,
     * kl_weight [R_kl] (float32).
     */
    public Map<String, HostTensor> staticFeed() {
        return staticFeed;
    }

    /**
     * wd_scale [1] = weight_decay / ||v_init||^2 (float64 norm, as packing.wd_scale), the
     * coefficient of the objective's ||delta|| term.
     */
    public HostTensor wdScale(float[] vInit) {
        double ss = 0;
        for (float v : vInit) {
            ss += (double) v * v;
        }
        double norm = Math.sqrt(ss);
        return HostTensor.f32(new float[] {(float) (objective.weightDecay / (norm * norm))}, 1);
    }

    /** Pad {@code b} to {@code shapes}; MobiEditError naming the shape when it does not fit. */
    public static EditPack pack(EditBatch b, Manifest.Shapes shapes, Manifest.Objective objective) {
        int rows = b.rows;
        int t = b.width;
        long[] s = b.subjectIdx;
        long[] last = b.lastIdx;
        int suffix = b.suffixLength();
        int prefix = b.prefixLength();
        // readouts(): target positions of the rewrite rows, then each KL row's last position
        List<long[]> ro = new ArrayList<long[]>();
        for (int r = 0; r < b.nRewrite; r++) {
            for (int c = 0; c < t; c++) {
                long label = b.labels[r * t + c];
                if (label != -100) {
                    ro.add(new long[] {r, c - s[r], label});
                }
            }
        }
        for (int r = b.nRewrite; r < rows; r++) {
            ro.add(new long[] {r, last[r] - s[r], -1});
        }
        int nT = 0;
        for (long[] x : ro) {
            nT += x[2] >= 0 ? 1 : 0;
        }
        int nKl = rows - b.nRewrite;
        fit("rows", rows, shapes.editRows, "edit_rows");
        fit("suffix", suffix, shapes.editSuffix, "edit_suffix");
        fit("prefix", prefix, shapes.editPrefix, "edit_prefix");
        fit("tokens", t, shapes.editTokens(), "edit_tokens");
        fit("targets", nT, shapes.editTargets, "edit_targets");
        fit("KL read-outs", nKl, shapes.editKl, "edit_kl");

        int bp = shapes.editRows;
        int sp = shapes.editSuffix;
        int pp = shapes.editPrefix;
        int n = shapes.editTokens();
        long[] ids = new long[bp * n];
        long[] suffixPos = new long[bp * sp];
        long[] subjectPos = new long[bp];
        for (int r = 0; r < rows; r++) {
            System.arraycopy(b.inputIds, r * t, ids, r * n, t);
            for (int j = 0; j < sp; j++) {
                suffixPos[r * sp + j] = Math.min(s[r] + j, t - 1);
            }
            subjectPos[r] = s[r];
        }
        long[] sPad = new long[bp];
        long[] lastPad = new long[bp];
        for (int r = 0; r < bp; r++) {
            sPad[r] = r < rows ? s[r] : 0;
            lastPad[r] = r < rows ? last[r] : -1;
        }
        long[] mask = mask(sPad, lastPad, sp, pp);

        int rt = shapes.editTargets;
        int rkl = shapes.editKl;
        long[] tIndex = new long[rt];
        long[] tLabel = new long[rt];
        float[] tWeight = new float[rt];
        float[] tRows = new float[rt * bp];
        long[] klEdit = new long[rkl];
        long[] klPrefix = new long[rkl];
        float[] klWeight = new float[rkl];
        float w = (float) (1.0 / ((double) b.targetLen * b.nRewrite));
        float kw = (float) (objective.klFactor / nKl);
        int i = 0;
        int k = 0;
        for (long[] x : ro) {
            int r = (int) x[0];
            if (x[2] >= 0) {
                tIndex[i] = r * sp + x[1];
                tLabel[i] = x[2];
                tWeight[i] = w;
                tRows[i * bp + r] = 1f;
                i++;
            } else {
                klEdit[k] = r * sp + x[1];
                klPrefix[k] = (long) r * n + last[r];
                klWeight[k] = kw;
                k++;
            }
        }
        Map<String, HostTensor> pf = new LinkedHashMap<String, HostTensor>();
        pf.put("input_ids", HostTensor.i64(ids, bp, n));
        pf.put("suffix_pos", HostTensor.i64(suffixPos, bp, sp));
        pf.put("subject_pos", HostTensor.i64(subjectPos, bp));
        pf.put("kl_index", HostTensor.i64(klPrefix, rkl));
        Map<String, HostTensor> sf = new LinkedHashMap<String, HostTensor>();
        sf.put("mask", HostTensor.i64(mask, bp, 1, sp, pp + sp));
        sf.put("target_index", HostTensor.i64(tIndex, rt));
        sf.put("target_label", HostTensor.i64(tLabel, rt));
        sf.put("target_weight", HostTensor.f32(tWeight, rt));
        sf.put("target_rows", HostTensor.f32(tRows, rt, bp));
        sf.put("kl_suffix_index", HostTensor.i64(klEdit, rkl));
        sf.put("kl_weight", HostTensor.f32(klWeight, rkl));
        return new EditPack(rows, b.nRewrite, b.targetLen, shapes, objective, pf, sf);
    }

    /**
     * build_mask: [B, 1, S, P+S] of the suffix queries over (prefix keys, suffix keys). Prefix key
     * p is visible iff p < s_b; suffix key j' iff j' <= j and s_b + j' <= last_b. Query rows past
     * the row's end see prefix key 0 only. 1 = visible, 0 = hidden (int64, as the program takes
     * it).
     */
    static long[] mask(long[] s, long[] last, int sp, int pp) {
        int rows = s.length;
        int width = pp + sp;
        long[] m = new long[rows * sp * width];
        for (int b = 0; b < rows; b++) {
            for (int j = 0; j < sp; j++) {
                int at = (b * sp + j) * width;
                if (s[b] + j > last[b]) {
                    m[at] = 1;
                    continue;
                }
                for (int p = 0; p < pp; p++) {
                    m[at + p] = p < s[b] ? 1 : 0;
                }
                for (int q = 0; q <= j; q++) {
                    m[at + pp + q] = s[b] + q <= last[b] ? 1 : 0;
                }
            }
        }
        return m;
    }

    private static void fit(String name, int need, int have, String field) {
        if (need > have) {
            throw ManifestFields.err("shapes." + field, "this edit needs " + name + " " + need
                + ", the programs were exported for " + have,
                "shorten the subject, prompt or answer, or re-export with larger edit shapes");
        }
    }
}
