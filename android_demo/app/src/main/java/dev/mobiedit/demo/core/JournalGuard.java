package dev.mobiedit.demo.core;

/**
 * Refuse a journal made for another model (mobiedit/journal_guard.py): every entry of a bundle's
 * journal must be based on the bundle's own keystats {@code base_weight} (same tensor_sha256) and
 * edit the bundle's module. A journal copied from another model of the same shape would otherwise
 * load its factors into this bundle's slots.
 */
public final class JournalGuard {
    private JournalGuard() {
    }

    /** Throws {@link MobiEditError} naming the first entry that does not belong. */
    public static void checkBelongs(Journal journal, Tensor baseWeight, String module) {
        String sha = TensorHash.of(baseWeight);
        String path = new java.io.File(journal.folder(), Journal.JOURNAL_FILE).getPath();
        for (JournalEntry e : journal.entries()) {
            if (!e.baseSha256.equals(sha) || !e.module.equals(module)) {
                throw new MobiEditError("edit " + e.id + " was computed on another model's weight ("
                    + (e.module.equals(module) ? "base_sha256" : "module") + " differs from this bundle's)",
                    path + ", edit " + e.id + ", field '" + (e.module.equals(module) ? "base_sha256" : "module")
                    + "'", "use the journal written for this bundle, or start a new one");
            }
        }
    }
}
