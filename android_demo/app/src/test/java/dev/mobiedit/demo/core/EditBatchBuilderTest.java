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

/** Against edit_batch_case.json: mobiedit.editing.context.build_edit_inputs on the same tokenizer. */
class EditBatchBuilderTest {
    @SuppressWarnings("unchecked")
    static Map<String, Object> pyCase() throws Exception {
        return Json.parseObject(Files2.readText(Fixtures.resource("edit_batch_case.json")), "case");
    }

    @SuppressWarnings("unchecked")
    static EditBatch build() throws Exception {
        Map<String, Object> c = pyCase();
        EditRequest req = EditRequest.fromForm((String) c.get("subject"), (String) c.get("prompt"),
            (String) c.get("target_new"));
        List<String> templates = new ArrayList<>();
        for (Object t : (List<Object>) c.get("templates")) {
            templates.add((String) t);
        }
        return EditBatchBuilder.build(Fixtures.tokenizer(), req, templates, EditBatchBuilder.KL_PROMPT, 0);
    }

    /** Python's [rows, T] matrix, row-major. */
    @SuppressWarnings("unchecked")
    static long[] flat(Object rows) {
        return ((List<Object>) rows).stream().flatMap(r -> ((List<Object>) r).stream())
            .mapToLong(x -> (Long) x).toArray();
    }

    static long[] longs(Object l) {
        return ((List<?>) l).stream().mapToLong(x -> (Long) x).toArray();
    }

    @Test
    @SuppressWarnings("unchecked")
    void equalsPythonsEditInputs() throws Exception {
        Map<String, Object> c = pyCase();
        EditBatch b = build();
        assertEquals(4, b.rows);
        assertEquals(((List<Object>) ((List<Object>) c.get("input_ids")).get(0)).size(), b.width);
        assertEquals(((Long) c.get("n_rewrite")).intValue(), b.nRewrite);
        assertEquals(((Long) c.get("target_len")).intValue(), b.targetLen);
        assertArrayEquals(flat(c.get("input_ids")), b.inputIds);
        assertArrayEquals(flat(c.get("attention_mask")), b.attentionMask);
        assertArrayEquals(flat(c.get("labels")), b.labels);
        assertArrayEquals(longs(c.get("subject_idx")), b.subjectIdx);
        assertArrayEquals(longs(c.get("last_idx")), b.lastIdx);
        assertEquals(b.nRewrite * b.targetLen, b.targetReadouts());
        assertEquals(1, b.klRows());
    }

    @Test
    void usesTheBundlesKlPromptAndRefusesBadRequests() throws Exception {
        ByteLevelBpe tok = Fixtures.tokenizer();
        EditRequest req = EditRequest.fromForm("Paris", "{} is the capital of", "France");
        EditBatch b = EditBatchBuilder.build(tok, req, Arrays.asList("{}"), "Everyone knows {}", 0);
        int[] kl = tok.encode("Everyone knows Paris", true);
        assertEquals(kl.length - 1, b.lastIdx[1]);
        assertEquals(kl.length - 1, b.subjectIdx[1]);
        assertThrows(MobiEditError.class,
            () -> EditBatchBuilder.build(tok, req, new ArrayList<>(), "{} is a", 0));
        MobiEditError e = assertThrows(MobiEditError.class,
            () -> EditBatchBuilder.build(tok, req, Arrays.asList("{}"), "Somebody is a", 0));
        assertTrue(e.getMessage().contains("does not occur"), e.getMessage());
    }

    /** mobiedit.prompts.subject_context_error: SmolLM2's tokenizer adds no BOS. */
    @Test
    void refusesASubjectAtTheFirstPositionOfATokenizerWithoutBos() throws Exception {
        ByteLevelBpe smol = SmolLM2Fixtures.tokenizer();
        EditRequest first = EditRequest.fromForm("Israel", "{}'s capital city is", "Damascus");
        MobiEditError e = assertThrows(MobiEditError.class,
            () -> EditBatchBuilder.checkSubjectContext(smol, first));
        assertTrue(e.getMessage().contains("first token"), e.getMessage());
        assertTrue(e.getMessage().contains("field 'Prompt'"), e.getMessage());
        assertTrue(e.getMessage().contains("reword the prompt"), e.getMessage());
        // words before the subject, or a two-token subject whose last token is past position 0
        EditBatchBuilder.checkSubjectContext(smol,
            EditRequest.fromForm("Israel", "The capital city of {} is", "Damascus"));
        assertTrue(smol.encode("Danielle Darrieux", true).length > 1);
        EditBatchBuilder.checkSubjectContext(smol,
            EditRequest.fromForm("Danielle Darrieux", "{}'s mother tongue is", "English"));
        // a tokenizer that adds a BOS never puts the subject at position 0
        EditBatchBuilder.checkSubjectContext(Fixtures.tokenizer(),
            EditRequest.fromForm("Paris", "{} is the capital of", "France"));
    }
}
