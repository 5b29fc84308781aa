package dev.mobiedit.demo.core;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Map;
import org.junit.jupiter.api.Test;

/** Against edit_batch_case.json: mobiedit.rome.context.build_edit_inputs on the same tokenizer. */
class EditBatchBuilderTest {
    static final int WIDTH = 40;

    static Manifest.Shapes shapes(int rows, int prefix, int suffix, int readouts) {
        return new Manifest.Shapes(64, 8, 17, rows, suffix, prefix, readouts);
    }

    @SuppressWarnings("unchecked")
    static Map<String, Object> pyCase() throws Exception {
        return Json.parseObject(Files2.readText(Fixtures.resource("edit_batch_case.json")), "case");
    }

    @SuppressWarnings("unchecked")
    static EditBatch build(Manifest.Shapes s) throws Exception {
        Map<String, Object> c = pyCase();
        EditRequest req = EditRequest.fromForm((String) c.get("subject"), (String) c.get("prompt"),
            (String) c.get("target_new"));
        List<String> templates = new ArrayList<>();
        for (Object t : (List<Object>) c.get("templates")) {
            templates.add((String) t);
        }
        return EditBatchBuilder.build(Fixtures.tokenizer(), req, templates, s, 0);
    }

    /** Python's [rows, T] matrix right-padded to the program width. */
    @SuppressWarnings("unchecked")
    static long[] padded(Object rows, long fill) {
        List<Object> r = (List<Object>) rows;
        long[] out = new long[r.size() * WIDTH];
        Arrays.fill(out, fill);
        for (int i = 0; i < r.size(); i++) {
            List<Object> row = (List<Object>) r.get(i);
            for (int j = 0; j < row.size(); j++) {
                out[i * WIDTH + j] = (Long) row.get(j);
            }
        }
        return out;
    }

    static long[] longs(Object l) {
        return ((List<?>) l).stream().mapToLong(x -> (Long) x).toArray();
    }

    @Test
    void equalsPythonsEditInputs() throws Exception {
        Map<String, Object> c = pyCase();
        EditBatch b = build(shapes(4, 24, 16, 64));
        assertEquals(4, b.rows);
        assertEquals(WIDTH, b.width);
        assertEquals(((Long) c.get("n_rewrite")).intValue(), b.nRewrite);
        assertEquals(((Long) c.get("target_len")).intValue(), b.targetLen);
        assertArrayEquals(padded(c.get("input_ids"), 0), b.inputIds);
        assertArrayEquals(padded(c.get("attention_mask"), 0), b.attentionMask);
        assertArrayEquals(padded(c.get("labels"), -100), b.labels);
        assertArrayEquals(longs(c.get("subject_idx")), b.subjectIdx);
        assertArrayEquals(longs(c.get("last_idx")), b.lastIdx);
        assertEquals(b.nRewrite * b.targetLen + 1, b.readouts());
    }

    @Test
    void refusesEditsThatDoNotFitTheStaticShapes() throws Exception {
        MobiEditError e = assertThrows(MobiEditError.class, () -> build(shapes(4, 8, 16, 64)));
        assertTrue(e.getMessage().contains("shapes.edit_prefix"), e.getMessage());
        e = assertThrows(MobiEditError.class, () -> build(shapes(4, 24, 1, 64)));
        assertTrue(e.getMessage().contains("shapes.edit_suffix"), e.getMessage());
        e = assertThrows(MobiEditError.class, () -> build(shapes(4, 24, 16, 2)));
        assertTrue(e.getMessage().contains("shapes.edit_readouts"), e.getMessage());
        e = assertThrows(MobiEditError.class, () -> build(shapes(5, 24, 16, 64)));
        assertTrue(e.getMessage().contains("shapes.edit_rows"), e.getMessage());
        e = assertThrows(MobiEditError.class, () -> build(new Manifest.Shapes(64, 8, 17, 4, 4, 4, 64)));
        assertTrue(e.getMessage().contains("edit_prefix + edit_suffix"), e.getMessage());
    }
}
