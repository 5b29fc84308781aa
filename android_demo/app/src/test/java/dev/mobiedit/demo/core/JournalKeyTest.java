package dev.mobiedit.demo.core;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.file.Path;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * Each bundle edit's key k̄ is journaled in its factors file as "k" (mobiedit/journal.py
 * record(key=)); the protecting rules read the active edits' keys back, and refuse by name an
 * active entry recorded without one.
 */
class JournalKeyTest {
    @Test
    void keysRoundTripUndoneEditsLeaveTheCacheAndAKeylessEntryIsNamed(@TempDir Path tmp) throws Exception {
        Journal j = Journal.open(JournalTest.pyJournalCopy(tmp));
        EditRequest req = EditRequest.fromForm("Lionel Messi", "{} plays", "cricket");
        float[] k3 = {1, 2, 3, 4, 5, 6};
        float[] k4 = {0, -1, 0.5f, 0, 2, 1};
        MobiEditError bad = assertThrows(MobiEditError.class, () -> j.record(req, JournalTest.TARGET,
            new float[4], new float[6], new float[5], null, null, null, "t"));
        assertEquals("record(), argument 'key'", bad.where());
        // py_journal's active edit 1 was written without a key: a protecting rule names it
        MobiEditError old = assertThrows(MobiEditError.class, () -> JournalKeys.active(j));
        assertTrue(old.getMessage().contains("edit 1 was recorded without its key"), old.getMessage());
        assertNull(JournalKeys.load(j, j.entry(1)));
        j.undo(1);
        JournalEntry e3 = j.record(req, JournalTest.TARGET, new float[] {1, 0, 0, 0}, new float[6], k3, null,
            null, null, "t");
        JournalEntry e4 = j.record(req, JournalTest.TARGET, new float[] {0, 1, 0, 0}, new float[6], k4, null,
            null, null, "t");
        Journal again = Journal.open(tmp.resolve("journal").toFile());
        assertArrayEquals(k3, JournalKeys.load(again, again.entry(e3.id)));
        float[][] keys = JournalKeys.active(again);
        assertEquals(2, keys.length);
        assertArrayEquals(k4, keys[1]);
        again.undo(e3.id);
        assertArrayEquals(new float[][] {k4}, JournalKeys.active(again));
    }
}
