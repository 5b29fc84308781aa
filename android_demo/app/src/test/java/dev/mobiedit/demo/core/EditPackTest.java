package dev.mobiedit.demo.core;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.Arrays;
import org.junit.jupiter.api.Test;

/** mobiedit.export.packing.pack_edit in Java (its fixture parity is in app.ExportedBundleTest). */
class EditPackTest {
    static EditBatch batch() throws Exception {
        EditRequest req = EditRequest.fromForm("Danielle Darrieux", "The mother tongue of {} is", "English");
        return EditBatchBuilder.build(Fixtures.tokenizer(), req, Fixtures.TEMPLATES, "{} is a", 0);
    }

    static Manifest.Shapes shapes(int rows, int suffix, int prefix, int targets, int kl) {
        return new Manifest.Shapes(64, 8, 17, rows, suffix, prefix, targets, kl);
    }

    @Test
    void padsToTheStaticShapes() throws Exception {
        EditBatch b = batch();
        Manifest.Shapes s = shapes(5, 16, 24, 40, 2);
        EditPack p = EditPack.pack(b, s, Manifest.Objective.rome());
        assertEquals(3, p.nRows);
        assertArrayEquals(new long[] {5, 40}, p.prefixFeed().get("input_ids").shape());
        assertArrayEquals(new long[] {5, 1, 16, 40}, p.staticFeed().get("mask").shape());
        long[] ids = p.prefixFeed().get("input_ids").longs();
        assertArrayEquals(Arrays.copyOfRange(b.inputIds, 0, b.width), Arrays.copyOfRange(ids, 0, b.width));
        assertEquals(0, ids[3 * 40], "padded rows are zeros");
        // one KL read-out (row 2, its last token), weight kl_factor / 1; the padded one weighs 0
        long[] klPrefix = p.prefixFeed().get("kl_index").longs();
        assertEquals(2 * 40 + b.lastIdx[2], klPrefix[0]);
        assertEquals(0, klPrefix[1]);
        assertArrayEquals(new float[] {0.0625f, 0f}, p.staticFeed().get("kl_weight").floats());
        long[] klEdit = p.staticFeed().get("kl_suffix_index").longs();
        assertEquals(null, p.staticFeed().get("kl_index"), "kl_index is the prefix program's name");
        assertEquals(2 * 16 + b.lastIdx[2] - b.subjectIdx[2], klEdit[0]);
        // target weights 1 / (target_len * n_rewrite) on the real read-outs, 0 on padding
        float[] tw = p.staticFeed().get("target_weight").floats();
        int nT = b.nRewrite * b.targetLen;
        assertEquals((float) (1.0 / nT), tw[0]);
        assertEquals((float) (1.0 / nT), tw[nT - 1]);
        assertEquals(0f, tw[nT]);
        float[] rows = p.staticFeed().get("target_rows").floats();
        assertEquals(1f, rows[0], "1 at the read-out's row: the program counts hits per row");
        assertEquals(1f, rows[(nT - 1) * 5 + 1]);
        assertEquals(0f, rows[1]);
        // mask: a padded row sees prefix key 0 only; a real query sees keys before its subject
        assertEquals(HostTensor.DType.I64, p.staticFeed().get("mask").dtype);
        long[] mask = p.staticFeed().get("mask").longs();
        int w = 40;
        long[] padded = Arrays.copyOfRange(mask, 4 * 16 * w, 4 * 16 * w + w);
        assertEquals(1, padded[0]);
        assertEquals(1, sum(padded));
        long[] first = Arrays.copyOfRange(mask, 0, w);
        assertEquals(b.subjectIdx[0] + 1, sum(first), "s_0 prefix keys + itself");
        assertEquals(1, first[24], "suffix key 0");
        assertEquals(0, first[25]);
        // wd_scale = weight_decay / ||v||^2
        assertEquals(0.5f / 25f, p.wdScale(new float[] {3, 4}).floats()[0]);
    }

    static long sum(long[] a) {
        long s = 0;
        for (long x : a) {
            s += x;
        }
        return s;
    }

    @Test
    void refusesWhatDoesNotFitNamingTheShape() throws Exception {
        EditBatch b = batch();
        String[][] cases = {{"2", "16", "24", "40", "1", "edit_rows"}, {"3", "2", "24", "40", "1", "edit_suffix"},
            {"3", "16", "4", "40", "1", "edit_prefix"}, {"3", "16", "24", "3", "1", "edit_targets"}};
        for (String[] c : cases) {
            Manifest.Shapes s = shapes(Integer.parseInt(c[0]), Integer.parseInt(c[1]), Integer.parseInt(c[2]),
                Integer.parseInt(c[3]), Integer.parseInt(c[4]));
            MobiEditError e = assertThrows(MobiEditError.class, () -> EditPack.pack(b, s, Manifest.Objective.rome()));
            assertTrue(e.getMessage().contains("field 'shapes." + c[5] + "'"), c[5] + ": " + e.getMessage());
        }
    }
}
