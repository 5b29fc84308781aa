package dev.mobiedit.demo.core;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.mobiedit.demo.core.EditStateMachine.Phase;
import java.util.ArrayList;
import java.util.List;
import org.junit.jupiter.api.Test;

class EditStateMachineTest {
    EditStateMachine m = new EditStateMachine();
    List<Phase> seen = new ArrayList<>();

    EditStateMachineTest() {
        m.setListener(x -> seen.add(x.phase()));
    }

    void submitValid() {
        assertNotNull(m.submit("Toko Yasuda", "{} plays the", "piano"));
    }

    @Test
    void happyPathWithEarlyStopAndApply() {
        assertTrue(m.canSubmit());
        submitValid();
        assertEquals(Phase.PREPARING, m.phase());
        assertTrue(m.isBusy() && m.canCancel() && !m.canSubmit());
        m.prepared(" guitar");
        m.progress(1, 2.5, 17);
        m.progress(2, 0.7, 34);
        assertEquals("Step 2  loss 0.7000  (34 loss evaluations)", m.statusLine());
        m.finished("SUCCESS_CHECK", true, 2, 35);
        assertEquals(Phase.SUCCEEDED, m.phase());
        assertTrue(m.canApply() && !m.isBusy());
        assertTrue(m.statusLine().startsWith("Early stop after 2 steps (SUCCESS_CHECK)"), m.statusLine());
        m.apply();
        m.applied(7, " piano");
        assertEquals(Phase.APPLIED, m.phase());
        assertEquals(" guitar", m.before());
        assertEquals(" piano", m.after());
        assertEquals(7, m.editId());
        assertEquals(List.of(2.5, 0.7), m.losses());
        assertEquals(List.of(Phase.PREPARING, Phase.RUNNING, Phase.RUNNING, Phase.RUNNING, Phase.SUCCEEDED,
            Phase.APPLYING, Phase.APPLIED), seen);
        submitValid();  // a new edit may start from APPLIED and clears the old results
        assertNull(m.after());
        assertEquals(0, m.step());
    }

    @Test
    void invalidSubmitStaysAndNamesTheField() {
        assertNull(m.submit("Messi", "He plays", "piano"));
        assertEquals(Phase.IDLE, m.phase());
        assertTrue(m.error().contains("field 'Prompt'"), m.error());
        assertEquals(m.error(), m.statusLine());
        submitValid();
        assertNull(m.error());
    }

    @Test
    void notConvergedCanBeDiscarded() {
        submitValid();
        m.prepared("a");
        m.finished("MAX_STEPS", false, 150, 2550);
        assertEquals(Phase.NOT_CONVERGED, m.phase());
        assertTrue(m.statusLine().contains("MAX_STEPS"));
        assertThrows(IllegalStateException.class, this::submitValid);
        m.discard();
        assertEquals(Phase.IDLE, m.phase());
        assertNull(m.request());
    }

    @Test
    void cancelWhileRunning() {
        submitValid();
        m.prepared("a");
        m.cancel();
        assertEquals(Phase.CANCELLING, m.phase());
        assertFalse(m.canCancel());
        m.progress(3, 1.0, 51);  // late progress is ignored
        assertEquals(0, m.step());
        m.finished("MAX_STEPS", false, 3, 51);
        assertEquals(Phase.CANCELLED, m.phase());
        m.reset();
        assertEquals(Phase.IDLE, m.phase());
    }

    @Test
    void cancelWhilePreparingAndFailures() {
        submitValid();
        m.cancel();
        m.prepared("late");
        m.cancelled();
        assertEquals(Phase.CANCELLED, m.phase());
        submitValid();
        m.failed("manifest.json: sha256 mismatch — fix: copy again");
        assertEquals(Phase.FAILED, m.phase());
        assertTrue(m.statusLine().startsWith("Failed: manifest.json"));
        assertTrue(m.canSubmit());
    }

    @Test
    void illegalEventsNameEventAndPhase() {
        IllegalStateException e = assertThrows(IllegalStateException.class, m::apply);
        assertEquals("edit screen: event 'apply' is not allowed in phase IDLE", e.getMessage());
        assertThrows(IllegalStateException.class, () -> m.progress(1, 1, 1));
        assertThrows(IllegalStateException.class, () -> m.finished("X", true, 1, 1));
        assertThrows(IllegalStateException.class, m::cancel);
        submitValid();
        assertThrows(IllegalStateException.class, () -> m.applied(1, "x"));
        assertThrows(IllegalStateException.class, m::discard);
    }

    @Test
    void theLaddersRungAndTheWrittenVerdictShowInTheStatus() {
        submitValid();
        m.rung(1, 3, 0.5);
        assertEquals(Phase.PREPARING, m.phase());
        assertTrue(m.statusLine().endsWith("  clamp 0.5 (rung 1 of 3)"), m.statusLine());
        m.prepared(" guitar");
        m.progress(1, 2.5, 17);
        assertEquals("Step 1  loss 2.5000  (17 loss evaluations)  clamp 0.5 (rung 1 of 3)", m.statusLine());
        m.rung(2, 3, 0.75);
        assertEquals(Phase.RUNNING, m.phase());
        m.progress(1, 1.5, 2718);
        assertEquals("Step 1  loss 1.5000  (2718 loss evaluations)  clamp 0.75 (rung 2 of 3)", m.statusLine());
        assertEquals(2, m.rung());
        assertEquals(3, m.rungs());
        // the loop's check passed, the written edit does not say it: NOT_CONVERGED
        m.finished("SUCCESS_CHECK", false, true, 151, 2735);
        assertEquals(Phase.NOT_CONVERGED, m.phase());
        assertEquals(Boolean.TRUE, m.loopSucceeded());
        assertEquals("Early stop after 151 steps (SUCCESS_CHECK)  clamp 0.75 (rung 2 of 3), but the written"
            + " edit does not say it. Apply anyway or discard.", m.statusLine());
        m.discard();
        assertEquals(0, m.rungs());
        assertNull(m.loopSucceeded());
        // the loop missed its margin, the written edit says it: SUCCEEDED
        submitValid();
        m.prepared("a");
        m.progress(150, 0.9, 2700);
        m.finished("MAX_STEPS", true, false, 150, 2701);
        assertEquals(Phase.SUCCEEDED, m.phase());
        assertEquals("Stopped after 150 steps (MAX_STEPS), loss 0.9000; the written edit says it. Apply to keep it.",
            m.statusLine());
        m.apply();
        m.applied(1, "b");
        // a late rung while cancelling is ignored; a rung outside a run is refused
        submitValid();
        m.cancel();
        m.rung(2, 3, 0.75);
        assertEquals(0, m.rungs());
        m.cancelled();
        m.reset();
        IllegalStateException e = assertThrows(IllegalStateException.class, () -> m.rung(1, 3, 0.5));
        assertEquals("edit screen: event 'rung' is not allowed in phase IDLE", e.getMessage());
    }

    @Test
    void applyingShowsTheRepairsAndCancelStopsThem() {
        submitValid();
        m.prepared("a");
        m.finished("SUCCESS_CHECK", true, true, 3, 50);
        m.apply();
        assertEquals("Recording the edit…", m.statusLine());
        assertTrue(m.canCancel(), "while applying, cancel stops the repairs");
        m.repairing(2);
        assertEquals("Repairing edit #2 (lost after this edit)…", m.statusLine());
        assertEquals(Phase.APPLYING, m.phase());
        m.cancel();
        assertEquals(Phase.APPLYING, m.phase(), "the edit itself stays applied");
        assertFalse(m.canCancel());
        assertEquals("Stopping the repairs…", m.statusLine());
        m.applied(5, "b", 2, 1);
        assertEquals(Phase.APPLIED, m.phase());
        assertEquals("Applied as edit #5; repaired 2 earlier edit(s); 1 lost earlier edit(s) could not be "
            + "repaired.", m.statusLine());
        assertThrows(IllegalStateException.class, () -> m.repairing(3));
        submitValid();
        m.prepared("a");
        m.finished("SUCCESS_CHECK", true, true, 3, 50);
        m.apply();
        assertEquals("Recording the edit…", m.statusLine(), "a new edit starts without the old repair state");
        m.applied(6, "c", 0, 0);
        assertEquals("Applied as edit #6.", m.statusLine());
    }
}
