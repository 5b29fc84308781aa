package dev.mobiedit.demo.app;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.mobiedit.demo.core.ByteLevelBpe;
import dev.mobiedit.demo.core.EditBatch;
import dev.mobiedit.demo.core.EditBatchBuilder;
import dev.mobiedit.demo.core.EditPack;
import dev.mobiedit.demo.core.EditRequest;
import dev.mobiedit.demo.core.Files2;
import dev.mobiedit.demo.core.Manifest;
import dev.mobiedit.demo.core.Recipe;
import java.io.File;
import java.util.Arrays;
import java.util.Map;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;

/**
 * Against the bundle written by the real exporter (fixtures/exported_bundle, see
 * {@link ExportedBundle}): its recipe's clamp ladder is Python's, and verify after write calls
 * the prefix and edit programs as export/verify.py written_holds does — the factors of
 * mobiedit.export.ops (edit_case.json u, w) in the first free slot, the edit program at delta 0 —
 * with inputs that are what model.pte declares.
 */
class ExportedBundleWriteCheckTest {
    static Manifest m;

    @BeforeAll
    static void load() throws Exception {
        ExportedBundle.load();
        m = ExportedBundle.m;
    }

    @Test
    void theExportersRecipeClimbsPythonsLadder() {
        // exported before the recipe carried a ladder: mobiedit/ladder.py's defaults
        Recipe r = m.recipe;
        assertEquals(Arrays.asList(0.5, 0.75, 1.0), r.ladder);
        assertEquals(2, r.ladderFromEdits);
        // sequential_ladder(4.0) = (2.0, 3.0, 4.0) of export/ops.py _edit_one, from the second edit on
        assertEquals(4.0, m.edit.objective.clampNormFactor);
        assertArrayEquals(new double[] {2.0, 3.0, 4.0},
            Ladder.sequentialLadder(m.edit.objective.clampNormFactor, Ladder.fractionsFor(r, 1)));
        assertTrue(Ladder.fractionsFor(r, 0).isEmpty());
    }

    @Test
    @SuppressWarnings("unchecked")
    void theWrittenEditIsCheckedWithItsFactorsInTheFirstFreeSlot() throws Exception {
        File dir = ExportedBundle.dir;
        Map<String, Object> edit = ExportedBundle.edit;
        Map<String, Object> r = ExportedBundle.obj(edit, "request");
        EditRequest req = EditRequest.fromForm((String) r.get("subject"), (String) r.get("prompt"),
            (String) r.get("target_new"));
        ByteLevelBpe tok = ByteLevelBpe.fromJson(Files2.readText(new File(dir, "tokenizer.json")), "tokenizer.json");
        EditBatch batch = EditBatchBuilder.build(tok, req, m.edit.templates, m.edit.objective.klPrompt, m.padId());
        EditPack pack = EditPack.pack(batch, m.shapes, m.edit.objective);
        ExportedBundle.Recording rec = new ExportedBundle.Recording();
        BundlePrograms rt = new BundlePrograms(m, rec);
        EditRunner runner = new EditRunner(tok, m, rt.edit(), KeyStats.open(dir, m.dIn(), m.dOut()));
        float[] u = ExportedBundle.f32(ExportedBundle.obj(edit, "u"));
        float[] w = ExportedBundle.f32(ExportedBundle.obj(edit, "w"));
        int dOut = m.dOut();
        int dIn = m.dIn();
        float[][] slots = {new float[m.slots * dOut], new float[m.slots * dIn]};
        Boolean verdict = runner.writtenHolds(pack, slots, u, w, SuccessCriterion.of(m.recipe));

        assertEquals(2, rec.calls.size());
        ExportedBundle.Call prefix = rec.calls.get(0);
        assertEquals("prefix", prefix.program.method);
        ExportedBundle.assertCallMatchesThePte(prefix);
        float[] su = ExportedBundle.input(prefix, "slot_u").floats();
        float[] sw = ExportedBundle.input(prefix, "slot_w").floats();
        assertArrayEquals(u, Arrays.copyOf(su, dOut), "slot 0, the first free one, holds u");
        assertArrayEquals(w, Arrays.copyOf(sw, dIn));
        assertArrayEquals(new float[su.length - dOut], Arrays.copyOfRange(su, dOut, su.length));
        ExportedBundle.Call call = rec.calls.get(1);
        assertEquals("edit", call.program.method);
        ExportedBundle.assertCallMatchesThePte(call);
        assertArrayEquals(new float[m.shapes.editK * dOut], ExportedBundle.input(call, "deltas").floats(),
            "the written edit alone: delta 0");
        ExportedBundle.assertMatches("wd_scale", ExportedBundle.obj(edit, "wd_scale"),
            ExportedBundle.input(call, "wd_scale"));
        // the recording's edit program counts correct[0, b] = b: row 0 shows no target token
        assertFalse(verdict);

        // every slot taken: no verdict and no program call (the edit cannot be written anyway)
        Arrays.fill(slots[0], 1f);
        assertNull(runner.writtenHolds(pack, slots, u, w, SuccessCriterion.of(m.recipe)));
        assertEquals(2, rec.calls.size());
    }
}
