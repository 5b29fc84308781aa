package dev.mobiedit.demo.app;

import dev.mobiedit.demo.core.ByteLevelBpe;
import dev.mobiedit.demo.core.ChatTemplate;
import dev.mobiedit.demo.core.EditRequest;
import dev.mobiedit.demo.core.EditTarget;
import dev.mobiedit.demo.core.Files2;
import dev.mobiedit.demo.core.Generation;
import dev.mobiedit.demo.core.Journal;
import dev.mobiedit.demo.core.JournalEntry;
import dev.mobiedit.demo.core.JournalGuard;
import dev.mobiedit.demo.core.JournalKeys;
import dev.mobiedit.demo.core.Manifest;
import dev.mobiedit.demo.core.ManifestFields;
import dev.mobiedit.demo.core.ManifestReader;
import dev.mobiedit.demo.core.Recipe;
import java.io.File;
import java.text.SimpleDateFormat;
import java.util.ArrayList;
import java.util.Date;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.Set;
import java.util.TimeZone;
import java.util.concurrent.atomic.AtomicBoolean;

/**
 * A loaded bundle: verified manifest, tokenizer, key statistics, journal and the runtime's
 * programs, with the journal's active edits in the rank-one slots. All methods run on one worker
 * thread (the UI never calls them directly). Editing mirrors export/ops.py {@code edit_bundle}:
 * {@link #edit} (search, clamp ladder, verify after write), {@link #apply} (journal + slot),
 * then, with {@link #setRepair} on, {@link #repairAfter} ({@code --repair}); {@link #undo}
 * ({@code undo_bundle_edit}) also undoes the edit's repairs.
 */
public final class BundleSession {
    /** Tokens the chat and the before/after answers generate at most. */
    public static final int MAX_ANSWER_TOKENS = 24;
    private final File dir;
    private final Manifest manifest;
    private final ByteLevelBpe tok;
    private final KeyStats keys;
    private final Journal journal;
    private final ModelRuntime runtime;
    /** The bundle's chat template when it answers through it by default (else null). */
    private final ChatTemplate chat;
    /** Whether {@link #repairAfter} repairs (Python's --repair; off by default). */
    private volatile boolean repair;

    private BundleSession(File dir, Manifest manifest, ByteLevelBpe tok, KeyStats keys,
            Journal journal, ModelRuntime runtime, ChatTemplate chat) {
        this.dir = dir;
        this.chat = chat;
        this.manifest = manifest;
        this.tok = tok;
        this.keys = keys;
        this.journal = journal;
        this.runtime = runtime;
    }

    /**
     * Open {@code dir}: verify the manifest and every checksum, check the program contract, read
     * the tokenizer, keystats and journal, load the programs and fill the slots.
     */
    public static BundleSession open(File dir, ModelRuntime.Factory factory,
            ManifestReader.Progress progress) throws Exception {
        Manifest m = ManifestReader.open(dir, progress);
        if (!Manifest.RUNTIME_EXECUTORCH.equals(m.runtime)) {
            throw ManifestFields.err("runtime", "bundle runtime is '" + m.runtime + "'",
                "this app runs ExecuTorch bundles: mobiedit export --runtime executorch");
        }
        BundlePrograms.checkContract(m);
        File tf = new File(dir, "tokenizer.json");
        ByteLevelBpe tok = ByteLevelBpe.fromJson(Files2.readText(tf), tf.getPath());
        KeyStats keys = KeyStats.open(dir, m.dIn(), m.dOut());
        Journal journal = Journal.open(new File(dir, "journal"));
        if (keys.baseWeight() != null) {
            JournalGuard.checkBelongs(journal, keys.baseWeight(), m.editModule);
        }
        ChatTemplate chat = chatTemplate(dir, m);
        ModelRuntime rt = factory.open(dir, m);
        BundleSession s = new BundleSession(dir, m, tok, keys, journal, rt, chat);
        s.refreshSlots();
        return s;
    }

    public Manifest manifest() {
        return manifest;
    }

    public ByteLevelBpe tokenizer() {
        return tok;
    }

    public Journal journal() {
        return journal;
    }

    public File folder() {
        return dir;
    }

    /**
     * The bundle's chat template if it answers through it by default (manifest chat.default, the
     * model profile's chat_template), else null. A template this app cannot render is refused here
     * with a message rather than rendered differently from transformers.
     */
    static ChatTemplate chatTemplate(File dir, Manifest m) throws java.io.IOException {
        if (m.chatTemplateFile == null || !m.chatDefault) {
            return null;
        }
        File f = new File(dir, m.chatTemplateFile);
        return ChatTemplate.parse(Files2.readText(f), f.getPath());
    }

    /** Greedy completion of {@code prompt} as plain text (the edit's before / after answers). */
    public String answer(String prompt) throws Exception {
        return Generation.greedy(runtime.chat(), tok, prompt, MAX_ANSWER_TOKENS, manifest.eos);
    }

    /**
     * The chat screen's answer: {@code prompt} as a user turn of the bundle's chat template when
     * the bundle chats by default (as {@code mobiedit run}), else a plain completion.
     */
    public String chat(String prompt) throws Exception {
        if (chat == null) {
            return answer(prompt);
        }
        return Generation.chat(runtime.chat(), tok, chat, prompt, MAX_ANSWER_TOKENS, manifest.eos);
    }

    /** True when {@link #chat} uses the chat template. */
    public boolean chats() {
        return chat != null;
    }

    /**
     * How this bundle's edits are searched and judged: the manifest's recipe (the shipped
     * fallback for manifests exported without one).
     */
    public Recipe recipe() {
        return manifest.recipe;
    }

    /**
     * Search an edit (nothing recorded) as export/ops.py {@code _edit_one} does, with the
     * bundle's {@link #recipe}: its search ({@link EditRunner#forBundle}) and success rule
     * ({@link SuccessCriterion#of}), each search verified after write ({@link EditRunner}). When
     * the bundle will carry at least the recipe's {@code ladder.from_edits} edits (the journal's
     * active ones plus this one) the edit climbs the recipe's clamp ladder ({@link Ladder}),
     * else it is one search at edit.objective.clamp_norm_factor. Null if cancelled.
     */
    public EditOutcome edit(EditRequest req, EditRunner.Listener listener, AtomicBoolean cancel)
            throws Exception {
        EditRunner.Answerer answerer = new EditRunner.Answerer() {
            @Override
            public String answer(String prompt) throws Exception {
                return BundleSession.this.answer(prompt);
            }
        };
        return search(req, answerer, listener, cancel);
    }

    /** {@link #edit} with {@code answerer} for the before-answer (null: none, as a repair). */
    private EditOutcome search(final EditRequest req, EditRunner.Answerer answerer,
            EditRunner.Listener listener, final AtomicBoolean cancel) throws Exception {
        final EditRunner runner = runner();
        final float[][] slots = slots();
        final List<String> templates = templates();
        double clamp = manifest.edit.objective.clampNormFactor;
        List<Double> fractions = Ladder.fractionsFor(manifest.recipe, journal.active().size());
        if (fractions.isEmpty()) {
            runner.setConfig(EditRunner.forBundle(manifest, manifest.dOut(), clamp));
            return runner.run(req, templates, slots, answerer, listener, cancel);
        }
        Ladder.Attempt rung = new Ladder.Attempt() {
            @Override
            public EditOutcome attempt(double clampNormFactor, EditRunner.Answerer a,
                    EditRunner.Listener l) throws Exception {
                runner.setConfig(EditRunner.forBundle(manifest, manifest.dOut(), clampNormFactor));
                return runner.run(req, templates, slots, a, l, cancel);
            }
        };
        return Ladder.climb(fractions, clamp, rung, answerer, listener, cancel);
    }

    /** Record {@code outcome} in the journal and put it into a slot. */
    public JournalEntry apply(EditOutcome outcome) {
        return record(outcome, null);
    }

    /** {@link #apply}, the config also naming {@code repairOf} (non-null) as repair_of. */
    private JournalEntry record(EditOutcome outcome, Long repairOf) {
        Map<String, Object> config = outcome.configJson();
        if (repairOf != null) {
            config.put(Repair.KEY, repairOf);
        }
        JournalEntry e = journal.record(outcome.request, EditTarget.of(manifest), outcome.u,
            outcome.w, outcome.key, keys.baseWeight(), outcome.metrics(), config, nowIso());
        refreshSlots();
        return e;
    }

    /**
     * Undo edit {@code id} and its active repairs (export/ops.py undo_bundle_edit: the repairs
     * in id order, then the edit, under one hold of the journal lock); their slots are freed.
     * Returns the entry of {@code id}.
     */
    public JournalEntry undo(long id) {
        JournalEntry e = journal.undoWithDependents(id, Repair.KEY);
        refreshSlots();
        return e;
    }

    /** Turn the repair of lost earlier edits ({@link #repairAfter}) on or off (default off). */
    public void setRepair(boolean on) {
        repair = on;
    }

    /** Whether {@link #repairAfter} repairs. */
    public boolean repair() {
        return repair;
    }

    /**
     * The active edits whose new fact the bundle, with every active edit in the slots (journal
     * order), no longer says (export/verify.py lost_edits), in id order: ids in {@code skip} and
     * entries whose request is not a full edit request ({@link Repair#rechecks}) are not checked;
     * each other is judged by {@link EditRunner#saysNow} (the write check's rule at delta 0 with
     * the recipe's success fraction). Null if {@code cancel} was set between two rechecks.
     */
    public List<JournalEntry> lostEdits(Set<Long> skip, AtomicBoolean cancel) throws Exception {
        EditRunner runner = runner();
        float[][] slots = slots();
        List<JournalEntry> lost = new ArrayList<JournalEntry>();
        for (JournalEntry e : journal.active()) {
            if (skip.contains(e.id) || !Repair.rechecks(e)) {
                continue;
            }
            if (cancel != null && cancel.get()) {
                return null;
            }
            EditRequest req = EditRequest.fromJson(e.request, "journal, edit " + e.id
                + ", field 'request'");
            if (!runner.saysNow(req, templates(), slots)) {
                lost.add(e);
            }
        }
        return lost;
    }

    /**
     * After edit {@code justMade} was applied: with {@link #setRepair} on, re-teach every earlier
     * edit the bundle lost (export/ops.py _repair); off, nothing (no recheck). The rechecked
     * edits are the active ones except {@code justMade} and the repairs
     * ({@link Repair#skipAfter}), found lost by {@link #lostEdits}. For each lost edit in id
     * order: skipped when it already has {@link Repair#MAX_REPAIRS} active repairs or is
     * {@link Repair#superseded}; the loop stops once the active edits fill every slot; else
     * its request is edited as {@link #edit} does (clamp ladder, verify after write; no
     * before-answer) under the current slots and, if the outcome {@link EditOutcome#succeeded},
     * recorded with config repair_of = the lost id. Returns the repairs attempted, in order.
     * {@code cancel} stops between rechecks and between repairs; a repair cancelled during its
     * search is not recorded and ends the loop.
     */
    public List<Repair.Result> repairAfter(JournalEntry justMade, Repair.Listener listener,
            AtomicBoolean cancel) throws Exception {
        List<Repair.Result> out = new ArrayList<Repair.Result>();
        if (!repair) {
            return out;
        }
        List<JournalEntry> lost = lostEdits(Repair.skipAfter(journal, justMade.id), cancel);
        for (int i = 0; lost != null && i < lost.size(); i++) {
            JournalEntry e = lost.get(i);
            if (Repair.repairsOf(journal, e.id).size() >= Repair.MAX_REPAIRS
                    || Repair.superseded(journal, e)) {
                continue;
            }
            if (journal.active().size() >= manifest.slots || (cancel != null && cancel.get())) {
                break;
            }
            if (listener != null) {
                listener.repairing(e, i + 1, lost.size());
            }
            EditRequest req = EditRequest.fromJson(e.request, "journal, edit " + e.id
                + ", field 'request'");
            EditOutcome o = search(req, null, listener, cancel);
            if (o == null) {
                break;
            }
            out.add(new Repair.Result(e, o, o.succeeded ? record(o, e.id) : null));
        }
        return out;
    }

    /** Release the programs. */
    public void close() {
        runtime.close();
    }

    /** ROME's context templates of this bundle (manifest edit.templates, made at export). */
    public List<String> templates() {
        return manifest.edit.templates;
    }

    /** A runner of this bundle's edit programs with the recipe's success rule. */
    private EditRunner runner() {
        EditRunner runner = new EditRunner(tok, manifest, runtime.edit(), keys);
        runner.setSuccess(SuccessCriterion.of(manifest.recipe));
        if (manifest.edit.protects()) {
            runner.setProtectedKeys(JournalKeys.active(journal));
        }
        return runner;
    }

    private float[][] slots() {
        return journal.slotFactors(manifest.editModule, manifest.slots, manifest.dOut(),
            manifest.dIn());
    }

    private void refreshSlots() {
        float[][] s = slots();
        runtime.setSlots(s[0], s[1]);
    }

    /** UTC time like Python's datetime.now(timezone.utc).isoformat(). */
    public static String nowIso() {
        SimpleDateFormat f = new SimpleDateFormat("yyyy-MM-dd'T'HH:mm:ss.SSS'000+00:00'",
            Locale.ROOT);
        f.setTimeZone(TimeZone.getTimeZone("UTC"));
        return f.format(new Date());
    }
}
