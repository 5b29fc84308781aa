package dev.mobiedit.demo.app;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.mobiedit.demo.core.EditRequest;
import dev.mobiedit.demo.core.Files2;
import dev.mobiedit.demo.core.Fixtures;
import dev.mobiedit.demo.core.Journal;
import dev.mobiedit.demo.core.JournalEntry;
import dev.mobiedit.demo.core.Json;
import dev.mobiedit.demo.jni.Jni;
import java.io.File;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collections;
import java.util.List;
import java.util.Map;
import java.util.concurrent.atomic.AtomicBoolean;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * Repair of lost earlier edits in the app (BundleSession.repairAfter / lostEdits / undo), the
 * definition of export/ops.py _repair, repairs_of, superseded, MAX_REPAIRS, undo_bundle_edit and
 * export/verify.py lost_edits. The fake programs ({@link FactPrograms}) keep one value per
 * subject: a later edit of the same subject with another answer loses the earlier one.
 */
class RepairTest {
    static final String P1 = "The mother tongue of {} is";
    static final String P2 = "{} speaks";
    static final String P3 = "{} writes in";
    static final String P4 = "{} sings in";
    static final List<Long> NONE = Collections.emptyList();

    FactPrograms programs;
    BundleSession session;

    @BeforeAll
    static void lib() {
        Jni.require();
    }

    /** A fixture bundle with {@code slots} rank-one slots, opened on fresh {@link FactPrograms}. */
    @SuppressWarnings("unchecked")
    BundleSession open(Path tmp, long slots) throws Exception {
        File dir = tmp.resolve("bundle").toFile();
        Map<String, Object> m = Fixtures.writeBundle(dir, Fixtures.baseWeight());
        m.put("slots", slots);
        Files.write(new File(dir, "manifest.json").toPath(), Json.write(m, true).getBytes("UTF-8"));
        programs = new FactPrograms(Fixtures.tokenizer(), 17);
        session = BundleSession.open(dir, (d, man) -> programs.runtime(2), null);
        return session;
    }

    static EditRequest req(int subject, String prompt, int answer) {
        return EditRequest.fromForm(FactPrograms.SUBJECTS[subject], prompt, FactPrograms.ANSWERS[answer]);
    }

    /** Edit {@code r} through the session, check its written verdict held, apply it. */
    JournalEntry teach(EditRequest r) throws Exception {
        EditOutcome o = session.edit(r, null, null);
        assertTrue(o.succeeded && o.verified, "the written edit holds");
        return session.apply(o);
    }

    List<Long> lostIds() throws Exception {
        return ids(session.lostEdits(Collections.<Long>emptySet(), null));
    }

    static List<Long> ids(List<JournalEntry> es) {
        List<Long> out = new ArrayList<>();
        for (JournalEntry e : es) {
            out.add(e.id);
        }
        return out;
    }

    static List<Long> lostOf(List<Repair.Result> rs) {
        List<Long> out = new ArrayList<>();
        for (Repair.Result r : rs) {
            out.add(r.lost.id);
        }
        return out;
    }

    /** Records the repairs started. */
    static final class Events extends EditRunnerTest.Recorder implements Repair.Listener {
        final List<long[]> repairing = new ArrayList<>();
        AtomicBoolean cancelOnFirstStep;

        @Override
        public void repairing(JournalEntry lost, int index, int count) {
            repairing.add(new long[] {lost.id, index, count});
        }

        @Override
        public void progress(long step, double loss, long evals) {
            super.progress(step, loss, evals);
            if (cancelOnFirstStep != null) {
                cancelOnFirstStep.set(true);
            }
        }
    }

    @Test
    void detectionAgreesWithTheWriteCheck(@TempDir Path tmp) throws Exception {
        open(tmp, 10);
        EditOutcome o = session.edit(req(0, P1, 0), null, null);
        assertTrue(o.succeeded && o.verified);
        float[] written = programs.slotUs.get(programs.slotUs.size() - 1);  // the write check's slots
        session.apply(o);
        int calls = programs.prefixCalls;
        assertEquals(NONE, lostIds(), "an edit whose written verdict held is not lost right after it");
        assertEquals(calls + 1, programs.prefixCalls, "one prefix call per recheck");
        assertArrayEquals(written, programs.slotUs.get(programs.slotUs.size() - 1),
            "the recheck sees the slots the write check saw");

        teach(req(1, P1, 1));  // another subject: nothing lost
        assertEquals(NONE, lostIds());
        teach(req(0, P2, 2));  // the same subject, another answer: edit 1 lost, edit 3 not
        assertEquals(Arrays.asList(1L), lostIds());
        assertEquals(Arrays.asList(1L), ids(session.lostEdits(Collections.singleton(3L), null)));
        assertEquals(NONE, ids(session.lostEdits(new java.util.HashSet<>(Arrays.asList(1L, 3L)), null)));

        // an edit whose written verdict misses (forced in) is lost at once: the same verdict
        programs.liveSlots = 3;
        EditOutcome miss = session.edit(req(1, P2, 3), null, null);
        assertTrue(miss.verified && miss.loopSucceeded && !miss.succeeded);
        session.apply(miss);
        assertEquals(Arrays.asList(1L, 4L), lostIds());
        session.close();
    }

    @Test
    void aLostEditIsRepairedAndThenSaysItsFact(@TempDir Path tmp) throws Exception {
        open(tmp, 10);
        session.setRepair(true);
        JournalEntry e1 = teach(req(0, P1, 0));
        int calls = programs.prefixCalls;
        assertTrue(session.repairAfter(e1, null, null).isEmpty());
        assertEquals(calls, programs.prefixCalls, "the only edit is the one just made: no recheck");

        JournalEntry e2 = teach(req(0, P2, 1));
        Events ev = new Events();
        int chats = programs.chats;
        List<Repair.Result> rs = session.repairAfter(e2, ev, null);
        assertEquals(1, rs.size());
        Repair.Result r = rs.get(0);
        assertEquals(1L, r.lost.id);
        assertTrue(r.applied() && r.outcome.succeeded && r.outcome.verified);
        assertEquals(3L, r.entry.id);
        assertEquals(1L, r.entry.config.get("repair_of"));
        assertEquals(e1.request, r.entry.request, "the repair re-teaches the lost request");
        assertEquals(0.75, r.entry.config.get("success_fraction"));
        assertTrue(r.entry.config.containsKey("zo") && r.entry.config.containsKey("ladder_tries"),
            "the usual keys of an edit that climbs (three edits on the bundle)");
        assertEquals(true, r.entry.metrics.get("succeeded"));
        assertEquals(1, ev.repairing.size());
        assertArrayEquals(new long[] {1, 1, 1}, ev.repairing.get(0));
        assertFalse(ev.rungs.isEmpty(), "the repair climbs the ladder as any edit does");
        assertEquals(chats, programs.chats, "no before-answer for a repair");
        assertTrue(session.journal().entry(1).isActive(), "the lost edit stays: the repair was solved with it");

        assertEquals(Arrays.asList(2L), lostIds(), "edit 1 says its fact again (edit 2 is lost now)");
        assertEquals(3, session.journal().active().size());
        assertArrayEquals(session.journal().slotFactors(Fixtures.MODULE, 10, FactPrograms.D,
            FactPrograms.D_IN)[0], programs.slotsSet, "the runtime's slots hold the repair");
        session.close();
    }

    @Test
    void maxRepairsAndRepairsAreNotRechecked(@TempDir Path tmp) throws Exception {
        open(tmp, 10);
        session.setRepair(true);
        teach(req(0, P1, 0));
        List<Repair.Result> first = session.repairAfter(teach(req(0, P2, 1)), null, null);
        assertEquals(Arrays.asList(1L), lostOf(first));                  // repair 3 of 1
        List<Repair.Result> second = session.repairAfter(teach(req(0, P3, 2)), null, null);
        assertEquals(Arrays.asList(1L, 2L), lostOf(second), "repair 3 is lost too, but not rechecked");
        assertEquals(Arrays.asList(5L, 6L), Arrays.asList(second.get(0).entry.id, second.get(1).entry.id));
        List<Repair.Result> third = session.repairAfter(teach(req(0, P4, 3)), null, null);
        assertEquals(Arrays.asList(2L, 4L), lostOf(third), "edit 1 has " + Repair.MAX_REPAIRS + " repairs");
        assertEquals(Arrays.asList(8L, 9L), Arrays.asList(third.get(0).entry.id, third.get(1).entry.id));

        Journal j = session.journal();
        assertEquals(Arrays.asList(3L, 5L), ids(Repair.repairsOf(j, 1)));
        assertEquals(Arrays.asList(6L, 8L), ids(Repair.repairsOf(j, 2)));
        assertEquals(Arrays.asList(9L), ids(Repair.repairsOf(j, 4)));
        for (JournalEntry e : j.entries()) {
            Long of = Repair.repairOf(e);
            assertTrue(of == null || Arrays.asList(1L, 2L, 4L).contains(of), "no repair of a repair: " + of);
        }
        session.close();
    }

    @Test
    void aSupersededFactIsNotRepaired(@TempDir Path tmp) throws Exception {
        open(tmp, 10);
        session.setRepair(true);
        JournalEntry e1 = teach(req(0, P1, 0));
        JournalEntry e2 = teach(req(0, P1, 1));  // the same question, another answer
        assertEquals(Arrays.asList(1L), lostIds());
        assertTrue(Repair.superseded(session.journal(), e1));
        assertFalse(Repair.superseded(session.journal(), e2));
        assertTrue(session.repairAfter(e2, null, null).isEmpty());
        assertEquals(2, session.journal().entries().size());
        session.close();
    }

    @Test
    void fullSlotsStopTheRepairs(@TempDir Path tmp) throws Exception {
        open(tmp, 2);
        session.setRepair(true);
        teach(req(0, P1, 0));
        JournalEntry e2 = teach(req(0, P2, 1));
        int calls = programs.prefixCalls;
        assertTrue(session.repairAfter(e2, null, null).isEmpty());
        assertEquals(calls + 1, programs.prefixCalls, "rechecked (edit 1 lost), not repaired");
        assertEquals(2, session.journal().entries().size());
        session.close();
    }

    @Test
    void aRepairWhoseWrittenEditMissesIsNotRecorded(@TempDir Path tmp) throws Exception {
        open(tmp, 10);
        session.setRepair(true);
        teach(req(0, P1, 0));
        JournalEntry e2 = teach(req(0, P2, 1));
        programs.liveSlots = 2;  // a third slot has no effect: the repair's written edit misses
        List<Repair.Result> rs = session.repairAfter(e2, null, null);
        assertEquals(1, rs.size());
        assertFalse(rs.get(0).applied() || rs.get(0).outcome.succeeded);
        assertTrue(rs.get(0).outcome.loopSucceeded);
        assertNull(rs.get(0).entry);
        assertEquals(0, Repair.applied(rs));
        assertEquals(2, session.journal().entries().size(), "nothing recorded");
        session.close();
    }

    @Test
    void undoingAnEditUndoesItsRepairsOnly(@TempDir Path tmp) throws Exception {
        open(tmp, 10);
        session.setRepair(true);
        teach(req(0, P1, 0));                                                   // 1
        JournalEntry other = teach(req(1, P1, 2));                              // 2, another subject
        assertTrue(session.repairAfter(other, null, null).isEmpty());
        assertEquals(Arrays.asList(1L), lostOf(session.repairAfter(teach(req(0, P2, 1)), null, null)));
        assertEquals(Arrays.asList(1L, 2L, 3L, 4L), ids(session.journal().active()));  // 4 repairs 1

        JournalEntry undone = session.undo(1);
        assertEquals(1L, undone.id);
        assertEquals("undone", undone.status);
        assertEquals(Arrays.asList(2L, 3L), ids(session.journal().active()), "edit 1 and its repair 4");
        assertArrayEquals(session.journal().slotFactors(Fixtures.MODULE, 10, FactPrograms.D,
            FactPrograms.D_IN)[0], programs.slotsSet, "their slots are freed");
        Journal again = Journal.open(new File(session.folder(), "journal"));
        assertEquals("undone", again.entry(4).status);
        assertTrue(Files2.readText(new File(session.folder(), "journal/journal.jsonl")).contains("\"repair_of\": 1"));

        // undoing a repair alone leaves its original
        JournalEntry e5 = teach(req(1, P2, 3));  // 5 loses 2; 3 was taught next to 1, lost too
        assertEquals(Arrays.asList(2L, 3L), lostOf(session.repairAfter(e5, null, null)));  // 6, 7
        assertEquals(Arrays.asList(2L, 3L, 5L, 6L, 7L), ids(session.journal().active()));
        session.undo(6);
        assertEquals(Arrays.asList(2L, 3L, 5L, 7L), ids(session.journal().active()));
        session.close();
    }

    @Test
    void repairOffByDefaultRechecksNothing(@TempDir Path tmp) throws Exception {
        open(tmp, 10);
        assertFalse(session.repair());
        teach(req(0, P1, 0));
        JournalEntry e2 = teach(req(0, P2, 1));
        int prefix = programs.prefixCalls;
        int edit = programs.editCalls;
        assertTrue(session.repairAfter(e2, new Events(), null).isEmpty());
        assertEquals(prefix, programs.prefixCalls, "no program call");
        assertEquals(edit, programs.editCalls);
        assertEquals(Arrays.asList(1L), lostIds(), "though edit 1 is lost");
        session.close();
    }

    @Test
    void cancelStopsBetweenRechecksAndRepairs(@TempDir Path tmp) throws Exception {
        open(tmp, 10);
        session.setRepair(true);
        teach(req(0, P1, 0));
        teach(req(0, P2, 1));
        JournalEntry e3 = teach(req(0, P3, 2));  // edits 1 and 2 lost
        int calls = programs.prefixCalls;
        assertTrue(session.repairAfter(e3, null, new AtomicBoolean(true)).isEmpty());
        assertEquals(calls, programs.prefixCalls, "cancelled before the first recheck");

        AtomicBoolean cancel = new AtomicBoolean();
        Events ev = new Events();
        ev.cancelOnFirstStep = cancel;
        assertTrue(session.repairAfter(e3, ev, cancel).isEmpty(), "the cancelled repair is not recorded");
        assertEquals(1, ev.repairing.size(), "and the next one is not started");
        assertEquals(3, session.journal().entries().size());
        session.close();
    }
}
