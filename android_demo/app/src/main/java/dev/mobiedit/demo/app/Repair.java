package dev.mobiedit.demo.app;

import dev.mobiedit.demo.core.Journal;
import dev.mobiedit.demo.core.JournalEntry;
import java.util.ArrayList;
import java.util.HashSet;
import java.util.List;
import java.util.Set;

/**
 * Repair of lost earlier edits (issue 16), as {@code mobiedit edit --bundle --repair} defines it
 * (export/ops.py {@code MAX_REPAIRS}, {@code repairs_of}, {@code superseded} and the skip rule of
 * {@code _repair}; export/verify.py {@code lost_edits}). {@link BundleSession#repairAfter} runs
 * it: after an edit is applied, every other active edit that is neither a repair nor recorded
 * from a free-form request is rechecked ({@link BundleSession#lostEdits}: the write check's
 * "says it" rule, {@link EditRunner#saysNow}, with all active edits in the slots); a lost one is
 * re-taught by a new edit of its request, recorded with config {@value #KEY} = its id only when
 * the written edit holds. At most {@link #MAX_REPAIRS} active repairs per edit, none for a
 * {@link #superseded} fact, none once the slots are full. Undoing an edit undoes its repairs
 * ({@link BundleSession#undo}, export/ops.py {@code undo_bundle_edit}).
 */
public final class Repair {
    /** Active repairs per edit at most (export/ops.py MAX_REPAIRS). */
    public static final int MAX_REPAIRS = 2;
    /** The journal config key naming the edit a repair re-teaches. */
    public static final String KEY = "repair_of";

    /** Progress of {@link BundleSession#repairAfter}: the repairs' searches, and each repair. */
    public interface Listener extends EditRunner.Listener {
        /**
         * The repair of {@code lost} starts: lost edit {@code index} (1-based) of the
         * {@code count} found lost (some may be skipped, so not every index is reported).
         */
        void repairing(JournalEntry lost, int index, int count);
    }

    /** One repair attempted (export/ops.py BundleEditResult with repair_of set). */
    public static final class Result {
        /** The lost edit. */
        public final JournalEntry lost;
        /** The repair's search (its request is the lost edit's). */
        public final EditOutcome outcome;
        /** The recorded repair, or null: its written edit did not hold, nothing was recorded. */
        public final JournalEntry entry;

        Result(JournalEntry lost, EditOutcome outcome, JournalEntry entry) {
            this.lost = lost;
            this.outcome = outcome;
            this.entry = entry;
        }

        public boolean applied() {
            return entry != null;
        }
    }

    private Repair() {
    }

    /** The edit {@code e} re-teaches (its config {@value #KEY}), or null when it is no repair. */
    public static Long repairOf(JournalEntry e) {
        Object v = e.config == null ? null : e.config.get(KEY);
        return v instanceof Number ? Long.valueOf(((Number) v).longValue()) : null;
    }

    /** Whether {@code e} is a repair (its config has {@value #KEY}, whatever its value). */
    public static boolean isRepair(JournalEntry e) {
        return e.config != null && e.config.containsKey(KEY);
    }

    /** The active entries that re-teach edit {@code editId}, in id order (repairs_of). */
    public static List<JournalEntry> repairsOf(Journal journal, long editId) {
        List<JournalEntry> out = new ArrayList<JournalEntry>();
        for (JournalEntry e : journal.active()) {
            Object v = e.config == null ? null : e.config.get(KEY);
            if (v instanceof Number && ((Number) v).doubleValue() == editId) {
                out.add(e);
            }
        }
        return out;
    }

    /**
     * Whether a later active edit asks the same question (same subject and prompt) with another
     * answer (export/ops.py superseded): the user replaced the fact, so losing it is intended.
     */
    public static boolean superseded(Journal journal, JournalEntry entry) {
        for (JournalEntry e : journal.active()) {
            if (e.id > entry.id && same(e, entry, "subject") && same(e, entry, "prompt")
                    && !same(e, entry, "target_new")) {
                return true;
            }
        }
        return false;
    }

    /**
     * The ids not rechecked after edit {@code justMade} (export/ops.py _repair): that edit and
     * every active repair (their original is rechecked instead).
     */
    public static Set<Long> skipAfter(Journal journal, long justMade) {
        Set<Long> skip = new HashSet<Long>();
        skip.add(justMade);
        for (JournalEntry e : journal.active()) {
            if (isRepair(e)) {
                skip.add(e.id);
            }
        }
        return skip;
    }

    /**
     * Whether {@code e}'s stored request is a full edit request (has {@code target_new}; else it
     * was recorded from a free-form request and is not rechecked, as lost_edits).
     */
    public static boolean rechecks(JournalEntry e) {
        return e.request.containsKey("target_new");
    }

    /** How many of {@code results} were recorded. */
    public static int applied(List<Result> results) {
        int n = 0;
        for (Result r : results) {
            n += r.applied() ? 1 : 0;
        }
        return n;
    }

    private static boolean same(JournalEntry a, JournalEntry b, String key) {
        Object x = a.request.get(key);
        Object y = b.request.get(key);
        return x == null ? y == null : x.equals(y);
    }
}
