package dev.mobiedit.demo.core;

import java.io.File;
import java.io.IOException;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collections;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/**
 * The bundle's edit journal (folder {@code journal/}), readable and writable by both this app and
 * mobiedit/journal.py: {@code journal.jsonl} (one sorted-key JSON object per edit, rewritten whole
 * and atomically on every change), {@code edit-NNNNNN.safetensors} (float32 {@code u} [d_out],
 * {@code w} [d_in]; its sha256 is in the entry) and {@code base.safetensors} (the pre-edit weight
 * of every module the journal has touched, keyed by module name, written by the module's first
 * edit and never changed; its tensor_sha256 is every entry's {@code base_sha256}).
 *
 * <p>On the phone edits are not baked into weights: the active edits fill the inference programs'
 * rank-one slots in id order ({@link #slotFactors}); undo marks an entry "undone" and the next
 * slot fill leaves it out. One writer at a time, across processes: {@link #record} and {@link
 * #undo} hold {@link JournalLock} (shared with mobiedit) and re-read the journal under it, so an
 * edit made meanwhile by {@code mobiedit edit --bundle} is kept and its id never reused.
 * base.safetensors is read and written by {@link JournalBase}.
 */
public final class Journal {
    public static final String JOURNAL_FILE = "journal.jsonl";
    public static final String BASE_FILE = "base.safetensors";
    private static final String RESTORE = JournalEntry.RESTORE;

    private final File folder;
    private List<JournalEntry> entries;

    private Journal(File folder, List<JournalEntry> entries) {
        this.folder = folder;
        this.entries = entries;
    }

    /**
     * Open (or start, if the folder is missing or holds only base.safetensors) a journal,
     * validating every line and the sha256 of every factors file.
     */
    public static Journal open(File folder) {
        File path = new File(folder, JOURNAL_FILE);
        if (!path.exists()) {
            String[] names = folder.list();
            int n = 0;
            boolean onlyBase = true;
            for (String name : names == null ? new String[0] : names) {
                if (!JournalLock.LOCK_FILE.equals(name)) {
                    onlyBase &= BASE_FILE.equals(name) && ++n == 1;
                }
            }
            if (folder.exists() && (!folder.isDirectory() || !onlyBase)) {
                throw new MobiEditError("no " + JOURNAL_FILE + " in a non-empty folder",
                    folder.getPath(), "pass a journal folder, or a new/empty folder to start one");
            }
            Journal j = new Journal(folder, new ArrayList<JournalEntry>());
            j.write(j.entries);
            return j;
        }
        String text;
        try {
            text = Files2.readText(path);
        } catch (IOException e) {
            throw new MobiEditError("cannot read (" + e.getMessage() + ")", path.getPath(),
                "check permissions", e);
        }
        Journal j = new Journal(folder, JournalEntry.parseAll(text, path.getPath()));
        for (JournalEntry e : j.entries) {
            j.factorsBytes(e);
        }
        return j;
    }

    /** The journal folder. */
    public File folder() {
        return folder;
    }

    /** All entries in id order. */
    public List<JournalEntry> entries() {
        return Collections.unmodifiableList(entries);
    }

    /** Entries with status "applied", in id order. */
    public List<JournalEntry> active() {
        List<JournalEntry> out = new ArrayList<JournalEntry>();
        for (JournalEntry e : entries) {
            if (e.isActive()) {
                out.add(e);
            }
        }
        return out;
    }

    /** The entry with {@code id}; MobiEditError naming the valid ids otherwise. */
    public JournalEntry entry(long id) {
        for (JournalEntry e : entries) {
            if (e.id == id) {
                return e;
            }
        }
        List<Long> ids = new ArrayList<Long>();
        for (JournalEntry e : entries) {
            ids.add(e.id);
        }
        throw new MobiEditError("no edit " + id, journalPath(), "use one of the ids " + ids);
    }

    /** (u [d_out], w [d_in]) of an entry, after checking sha256, dtype and shapes. */
    public float[][] loadFactors(JournalEntry e) {
        String where = journalPath() + ", edit " + e.id;
        Safetensors.Contents c = parseFactors(e, where);
        String[] keys = {"u", "w"};
        int[] sizes = {e.dOut, e.dIn};
        float[][] out = new float[2][];
        for (int i = 0; i < 2; i++) {
            Tensor t = c.tensors.get(keys[i]);
            long[] shape = t == null ? null : t.shape();
            if (t == null || !"F32".equals(t.dtype) || shape.length != 1 || shape[0] != sizes[i]) {
                String got = t == null ? "None" : t.dtype + Arrays.toString(shape);
                throw new MobiEditError("factor '" + keys[i] + "' is " + got + ", expected float32["
                    + sizes[i] + "]", where + ", field '" + keys[i] + "'", RESTORE);
            }
            out[i] = t.floats();
        }
        return out;
    }

    /** The parsed factors file of {@code e} (sha256 checked), errors naming {@code where}. */
    Safetensors.Contents parseFactors(JournalEntry e, String where) {
        try {
            return Safetensors.parse(factorsBytes(e), where + ", field 'factors'");
        } catch (MobiEditError err) {
            throw new MobiEditError("factors file is not valid safetensors (" + err.detail() + ")",
                where + ", field 'factors'", RESTORE, err);
        }
    }

    /**
     * sha256 of {@code module}'s base weight: from the module's earlier entries, else
     * {@link TensorHash} of base.safetensors[module] (written by mobiedit export).
     */
    public String baseSha256(String module) {
        JournalEntry first = JournalEntry.firstOn(entries, module);
        if (first != null) {
            return first.baseSha256;
        }
        return JournalBase.sha256(folder, module);
    }

    /**
     * Record one edit: write its factors file, then the journal (both atomic). A crash before the
     * journal write leaves an orphan factors file that the next record overwrites.
     */
    public JournalEntry record(EditRequest request, EditTarget target, float[] u, float[] w,
            Map<String, Object> metrics, Map<String, Object> config, String timestamp) {
        return record(request, target, u, w, null, metrics, config, timestamp);
    }

    /**
     * Record one edit whose factors were computed on the module's current weight. The module's
     * first edit stores {@code baseWeight} (the weight before any edit, e.g. keystats'
     * base_weight) in base.safetensors under the module's name and takes its tensor_sha256 as
     * base_sha256, as mobiedit/journal.py does; later edits reuse the first entry's base_sha256.
     * With {@code baseWeight} null the first edit reads base.safetensors instead. Then the
     * factors file and the journal are written (each atomically); a crash before the journal
     * write leaves orphan files that the next record overwrites.
     */
    public JournalEntry record(EditRequest request, EditTarget target, float[] u, float[] w,
            Tensor baseWeight, Map<String, Object> metrics, Map<String, Object> config,
            String timestamp) {
        return record(request, target, u, w, null, baseWeight, metrics, config, timestamp);
    }

    /**
     * {@link #record} keeping the edit's key {@code key} [d_in] (null: none) in its factors file
     * as "k" (mobiedit/journal.py record(key=)): the protecting write rules hold the active
     * edits' keys still ({@link JournalKeys#active}).
     */
    public JournalEntry record(EditRequest request, EditTarget target, float[] u, float[] w,
            float[] key, Tensor baseWeight, Map<String, Object> metrics, Map<String, Object> config,
            String timestamp) {
        JournalLock lock = JournalLock.acquire(folder, JournalLock.DEFAULT_TIMEOUT_MS);
        try {
            entries = open(folder).entries; // another writer may have changed it
            return recordLocked(request, target, u, w, key, baseWeight, metrics, config, timestamp);
        } finally {
            lock.release();
        }
    }

    private JournalEntry recordLocked(EditRequest request, EditTarget target, float[] u, float[] w,
            float[] key, Tensor baseWeight, Map<String, Object> metrics, Map<String, Object> config,
            String timestamp) {
        if (u.length != target.dOut || w.length != target.dIn) {
            throw new MobiEditError("factors u[" + u.length + "], w[" + w.length
                + "] do not fit the module [" + target.dOut + "x" + target.dIn + "]",
                "record(), argument 'u'/'w'", "u has the module's output size, w its input size");
        }
        if (key != null && key.length != target.dIn) {
            throw new MobiEditError("key[" + key.length + "] does not fit the module's input size "
                + target.dIn, "record(), argument 'key'", "pass the edit's key k̄ [d_in]");
        }
        checkFinite(u, "u");
        checkFinite(w, "w");
        if (key != null) {
            checkFinite(key, "key");
        }
        JournalEntry prior = JournalEntry.firstOn(entries, target.module);
        if (prior != null && (prior.dOut != target.dOut || prior.dIn != target.dIn
                || !prior.family.equals(target.family))) {
            throw new MobiEditError("module '" + target.module + "' was edited as " + prior.family
                + " [" + prior.dOut + "x" + prior.dIn + "]", "record(), argument 'target'",
                "use the bundle the journal belongs to");
        }
        String baseSha;
        if (prior == null && baseWeight != null) {
            baseSha = JournalBase.store(folder, target, baseWeight);
        } else {
            baseSha = baseSha256(target.module);
        }
        long id = entries.isEmpty() ? 1 : entries.get(entries.size() - 1).id + 1;
        Map<String, String> meta = new LinkedHashMap<String, String>();
        meta.put("edit_id", Long.toString(id));
        meta.put("module", target.module);
        List<Tensor> tensors = new ArrayList<Tensor>(Arrays.asList(
            Tensor.f32("u", new long[] {u.length}, u), Tensor.f32("w", new long[] {w.length}, w)));
        if (key != null) {
            tensors.add(Tensor.f32("k", new long[] {key.length}, key));
        }
        byte[] blob = Safetensors.write(tensors, meta);
        Map<String, Object> m = new LinkedHashMap<String, Object>();
        m.put("id", id);
        m.put("request", request.toJson());
        m.put("method", target.method);
        m.put("module", target.module);
        m.put("layer", (long) target.layer);
        m.put("family", target.family);
        m.put("weight_out_in", target.weightOutIn);
        m.put("d_out", (long) target.dOut);
        m.put("d_in", (long) target.dIn);
        m.put("factors", JournalEntry.factorsName(id));
        m.put("sha256", Sha256.hex(blob));
        m.put("base_sha256", baseSha);
        m.put("status", JournalEntry.APPLIED);
        m.put("timestamp", timestamp);
        m.put("metrics", metrics);
        m.put("config", config);
        m.put("version", (long) JournalEntry.VERSION);
        JournalEntry entry = JournalEntry.create(roundTrip(m));
        try {
            Files2.writeAtomic(new File(folder, entry.factors), blob);
        } catch (IOException e) {
            throw new MobiEditError("cannot write factors (" + e.getMessage() + ")",
                folder.getPath(), "free storage space and retry", e);
        }
        List<JournalEntry> next = new ArrayList<JournalEntry>(entries);
        next.add(entry);
        write(next);
        return entry;
    }

    /** Mark {@code id} undone (journal rewritten atomically); its slot is freed on next fill. */
    public JournalEntry undo(long id) {
        return undoWithDependents(id, null);
    }

    /**
     * Mark {@code id} undone together with the active entries whose config {@code key} is
     * {@code id} (mobiedit's undo_bundle_edit with key "repair_of": an edit's repairs), those
     * first in id order, then {@code id}; all under one hold of the lock, each undo written
     * atomically. MobiEditError (nothing changed) if there is no entry {@code id}; if it is
     * already undone its dependents are still undone first, as in Python. Returns the entry
     * of {@code id}. {@code key} null: no dependents ({@link #undo}).
     */
    public JournalEntry undoWithDependents(long id, String key) {
        JournalLock lock = JournalLock.acquire(folder, JournalLock.DEFAULT_TIMEOUT_MS);
        try {
            entries = open(folder).entries;  // another writer may have changed it
            entry(id);
            for (JournalEntry e : active()) {
                Object v = e.config == null || key == null ? null : e.config.get(key);
                if (v instanceof Number && ((Number) v).doubleValue() == id) {
                    undoLocked(e.id);
                }
            }
            return undoLocked(id);
        } finally {
            lock.release();
        }
    }

    private JournalEntry undoLocked(long id) {
        JournalEntry e = entry(id);
        if (!e.isActive()) {
            throw new MobiEditError("edit " + id + " is already undone", journalPath(),
                "list active edits with active()");
        }
        JournalEntry undone = e.withStatus(JournalEntry.UNDONE);
        List<JournalEntry> next = new ArrayList<JournalEntry>();
        for (JournalEntry x : entries) {
            next.add(x.id == id ? undone : x);
        }
        write(next);
        return undone;
    }

    /**
     * Slot inputs of the inference programs: {@code [slots*dOut]} u rows and {@code [slots*dIn]}
     * w rows, the active edits of {@code module} in id order, zero rows for empty slots.
     */
    public float[][] slotFactors(String module, int slots, int dOut, int dIn) {
        float[] su = new float[slots * dOut];
        float[] sw = new float[slots * dIn];
        int s = 0;
        for (JournalEntry e : active()) {
            if (!e.module.equals(module)) {
                throw new MobiEditError("edit " + e.id + " changes " + e.module
                    + ", but this bundle's programs can only apply edits to " + module,
                    journalPath(), "undo edit " + e.id + " (or use the bundle it was made for)");
            }
            if (s == slots) {
                throw new MobiEditError("more active edits than the bundle's " + slots + " slots",
                    journalPath(), "undo an edit, or re-export with more slots (mobiedit export)");
            }
            float[][] f = loadFactors(e);
            System.arraycopy(f[0], 0, su, s * dOut, dOut);
            System.arraycopy(f[1], 0, sw, s * dIn, dIn);
            s++;
        }
        return new float[][] {su, sw};
    }

    // ------------------------------------------------------------------ internals

    private byte[] factorsBytes(JournalEntry e) {
        String where = journalPath() + ", edit " + e.id;
        byte[] data;
        try {
            data = Files2.read(new File(folder, e.factors));
        } catch (IOException ex) {
            throw new MobiEditError("factors file unreadable (" + ex.getMessage() + ")",
                where + ", field 'factors'", RESTORE, ex);
        }
        if (!Sha256.hex(data).equals(e.sha256)) {
            throw new MobiEditError("sha256 of " + e.factors
                + " does not match the journal (tampered or corrupt)", where + ", field 'sha256'",
                RESTORE);
        }
        return data;
    }

    private void write(List<JournalEntry> next) {
        StringBuilder sb = new StringBuilder();
        for (JournalEntry e : next) {
            sb.append(Json.write(e.toJson(), true)).append('\n');
        }
        try {
            Files2.writeTextAtomic(new File(folder, JOURNAL_FILE), sb.toString());
        } catch (IOException ex) {
            throw new MobiEditError("cannot write (" + ex.getMessage() + ")", journalPath(),
                "free storage space and retry", ex);
        }
        entries = next;
    }

    String journalPath() {
        return new File(folder, JOURNAL_FILE).getPath();
    }

    private static void checkFinite(float[] a, String name) {
        for (float v : a) {
            if (Float.isNaN(v) || Float.isInfinite(v)) {
                throw new MobiEditError("contains NaN/Inf", "record(), argument '" + name + "'",
                    "the edit diverged; nothing was recorded");
            }
        }
    }

    /** Values as they read back from JSON (ints as Long, nested maps/lists copied). */
    private static Map<String, Object> roundTrip(Map<String, Object> m) {
        return Json.parseObject(Json.write(m, true), "new journal entry");
    }
}
