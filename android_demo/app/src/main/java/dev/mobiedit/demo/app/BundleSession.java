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
import dev.mobiedit.demo.core.Manifest;
import dev.mobiedit.demo.core.ManifestReader;
import dev.mobiedit.demo.core.MobiEditError;
import dev.mobiedit.demo.core.Recipe;
import java.io.File;
import java.text.SimpleDateFormat;
import java.util.Date;
import java.util.List;
import java.util.Locale;
import java.util.TimeZone;
import java.util.concurrent.atomic.AtomicBoolean;

/**
 * A loaded bundle: verified manifest, tokenizer, key statistics, journal and the runtime's
 * programs, with the journal's active edits in the rank-one slots. All methods run on one worker
 * thread (the UI never calls them directly).
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
            throw new MobiEditError("bundle runtime is '" + m.runtime + "'",
                "manifest.json, field 'runtime'",
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
    public EditOutcome edit(final EditRequest req, EditRunner.Listener listener,
            final AtomicBoolean cancel) throws Exception {
        final EditRunner runner = new EditRunner(tok, manifest, runtime.edit(), keys);
        runner.setSuccess(SuccessCriterion.of(manifest.recipe));
        final float[][] slots = slots();
        final List<String> templates = templates();
        EditRunner.Answerer answerer = new EditRunner.Answerer() {
            @Override
            public String answer(String prompt) throws Exception {
                return BundleSession.this.answer(prompt);
            }
        };
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
        JournalEntry e = journal.record(outcome.request, EditTarget.of(manifest), outcome.u,
            outcome.w, keys.baseWeight(), outcome.metrics(), outcome.configJson(), nowIso());
        refreshSlots();
        return e;
    }

    /** Undo edit {@code id} (journal status "undone", slot freed). */
    public JournalEntry undo(long id) {
        JournalEntry e = journal.undo(id);
        refreshSlots();
        return e;
    }

    /** Release the programs. */
    public void close() {
        runtime.close();
    }

    /** ROME's context templates of this bundle (manifest edit.templates, made at export). */
    public List<String> templates() {
        return manifest.edit.templates;
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
