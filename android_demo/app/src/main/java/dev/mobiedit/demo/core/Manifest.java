package dev.mobiedit.demo.core;

import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.Map;

/**
 * A parsed, validated bundle manifest.json (docs/bundle_format.md, format version 1, as written
 * by export/bundle.py). Built only by {@link ManifestReader}; all fields are immutable.
 */
public final class Manifest {
    /** Highest format_version this app reads. */
    public static final int FORMAT_VERSION = 1;
    /** Runtimes a bundle may name; this app executes only "executorch". */
    public static final String RUNTIME_EXECUTORCH = "executorch";
    public static final String RUNTIME_ONNX = "onnxruntime";
    /** Program roles every bundle has (export/pipeline.py ROLES). */
    public static final String[] PROGRAMS = {"prefill", "decode", "prefix", "edit"};

    /** Model sizes ("dims"). */
    public static final class Dims {
        public final int vocabSize;
        public final int hiddenSize;
        /** The edited module's input size d_in (the key size). */
        public final int intermediateSize;
        /** The edited module's output size d_out (the value size). */
        public final int dOut;
        public final int numLayers;
        public final int numHeads;
        public final int numKvHeads;
        public final int headDim;

        public Dims(int vocabSize, int hiddenSize, int intermediateSize, int dOut, int numLayers,
                int numHeads, int numKvHeads, int headDim) {
            this.vocabSize = vocabSize;
            this.hiddenSize = hiddenSize;
            this.intermediateSize = intermediateSize;
            this.dOut = dOut;
            this.numLayers = numLayers;
            this.numHeads = numHeads;
            this.numKvHeads = numKvHeads;
            this.headDim = headDim;
        }
    }

    /** Static shapes of the exported programs ("shapes"; export/config.py EditShapes). */
    public static final class Shapes {
        /** KV-cache positions T. */
        public final int maxSeqLen;
        /** Tokens C per prefill call. */
        public final int prefillChunk;
        /** Deltas K per edit-program call. */
        public final int editK;
        /** Prompt rows B of the prefix / edit programs (rewrite rows + KL rows + padding). */
        public final int editRows;
        /** S: positions from the subject's last token to the row end. */
        public final int editSuffix;
        /** P: positions before the latest subject. */
        public final int editPrefix;
        /** R_t: target read-outs (sum over rewrite rows of the target length). */
        public final int editTargets;
        /** R_kl: KL read-outs (one per KL prompt). */
        public final int editKl;

        public Shapes(int maxSeqLen, int prefillChunk, int editK, int editRows, int editSuffix,
                int editPrefix, int editTargets, int editKl) {
            this.maxSeqLen = maxSeqLen;
            this.prefillChunk = prefillChunk;
            this.editK = editK;
            this.editRows = editRows;
            this.editSuffix = editSuffix;
            this.editPrefix = editPrefix;
            this.editTargets = editTargets;
            this.editKl = editKl;
        }

        /** N = edit_tokens = edit_prefix + edit_suffix: the prefix program's prompt length. */
        public int editTokens() {
            return editPrefix + editSuffix;
        }
    }

    /** One "programs" entry: where a role's program is and its positional tensor names. */
    public static final class Program {
        public final String role;
        public final String file;
        /** The .pte method (null for ONNX bundles). */
        public final String method;
        /** Positional input names, in the order the program takes them. */
        public final List<String> inputs;
        /** Positional output names, in the order the program returns them. */
        public final List<String> outputs;

        Program(String role, String file, String method, List<String> inputs,
                List<String> outputs) {
            this.role = role;
            this.file = file;
            this.method = method;
            this.inputs = Collections.unmodifiableList(new ArrayList<String>(inputs));
            this.outputs = Collections.unmodifiableList(new ArrayList<String>(outputs));
        }
    }

    /** ROME's value objective ("edit.objective"; mobiedit.editing.config.ObjectiveConfig). */
    public static final class Objective {
        public final double klFactor;
        /** KL prompt with one "{}" for the subject (ROME: "{} is a"). */
        public final String klPrompt;
        public final double weightDecay;
        public final double clampNormFactor;

        public Objective(double klFactor, String klPrompt, double weightDecay,
                double clampNormFactor) {
            this.klFactor = klFactor;
            this.klPrompt = klPrompt;
            this.weightDecay = weightDecay;
            this.clampNormFactor = clampNormFactor;
        }

        /** ROME's defaults (the exporter's ObjectiveConfig()). */
        public static Objective rome() {
            return new Objective(0.0625, "{} is a", 0.5, 4.0);
        }
    }

    /** What an edit on the phone needs ("edit"). */
    public static final class EditSetup {
        /** ROME's context templates, generated once at export: "{}" and "... . {}". */
        public final List<String> templates;
        public final Objective objective;
        /** keystats.safetensors holds the real C^-1 (false: identity). */
        public final boolean mom2;
        public final double ridge;
        /** The edited weight is [out, in] (nn.Linear); false for GPT-2's Conv1D [in, out]. */
        public final boolean weightOutIn;
        /**
         * The write rule ("edit.update.rule", docs/bundle_format.md): {@link #RULE_ROME} (C^-1 k̄)
         * or {@link #RULE_ROWS} (exact at every rewrite row's key, {@code KeyStats.rowsDirection});
         * absent in bundles exported before session 28: ROME's.
         */
        public final String updateRule;
        /** "edit.update.rows_ridge": the rows rule's relative ridge of its Gram matrix. */
        public final double rowsRidge;
        /**
         * "edit.update.edited_weight" (default 1): the weight of the active edits' keys in the
         * protecting rules' normal matrix C + weight K_p^T K_p.
         */
        public final double editedWeight;

        public static final String RULE_ROME = "rome";
        public static final String RULE_ROWS = "rows";
        /** C^-1 k̄ with the active edits' keys held still. */
        public static final String RULE_PROTECT = "protect";
        /** "rows" with the active edits' keys held still. */
        public static final String RULE_ROWS_PROTECT = "rows-protect";
        /** The rules a bundle can carry (mobiedit.editing.update.BUNDLE_UPDATE_RULES). */
        public static final List<String> UPDATE_RULES = Collections.unmodifiableList(
            java.util.Arrays.asList(RULE_ROME, RULE_ROWS, RULE_PROTECT, RULE_ROWS_PROTECT));
        public static final double DEFAULT_ROWS_RIDGE = 1e-2;

        public EditSetup(List<String> templates, Objective objective, boolean mom2, double ridge,
                boolean weightOutIn) {
            this(templates, objective, mom2, ridge, weightOutIn, RULE_ROME, DEFAULT_ROWS_RIDGE);
        }

        public EditSetup(List<String> templates, Objective objective, boolean mom2, double ridge,
                boolean weightOutIn, String updateRule, double rowsRidge) {
            this(templates, objective, mom2, ridge, weightOutIn, updateRule, rowsRidge, 1.0);
        }

        public EditSetup(List<String> templates, Objective objective, boolean mom2, double ridge,
                boolean weightOutIn, String updateRule, double rowsRidge, double editedWeight) {
            this.editedWeight = editedWeight;
            this.templates = Collections.unmodifiableList(new ArrayList<String>(templates));
            this.objective = objective;
            this.mom2 = mom2;
            this.ridge = ridge;
            this.weightOutIn = weightOutIn;
            this.updateRule = updateRule;
            this.rowsRidge = rowsRidge;
        }

        /** Whether the write rule holds the active edits' keys still (they are journaled). */
        public boolean protects() {
            return RULE_PROTECT.equals(updateRule) || RULE_ROWS_PROTECT.equals(updateRule);
        }
    }

    /** One "files" entry. */
    public static final class FileEntry {
        public final String sha256;
        public final long bytes;

        FileEntry(String sha256, long bytes) {
            this.sha256 = sha256;
            this.bytes = bytes;
        }
    }

    public final int formatVersion;
    public final String createdBy;
    public final String runtime;
    public final String modelFamily;
    /** The inference programs' scheme. */
    public final String quantization;
    /** The edit program's scheme. */
    public final String editQuantization;
    public final int editLayer;
    public final String editModule;
    public final Dims dims;
    public final Shapes shapes;
    public final int slots;
    /** Special token ids; -1 where the manifest has null. */
    public final int bos;
    public final int eos;
    public final int pad;
    /** Role ("prefill", "decode", "prefix", "edit") to its program entry. */
    public final Map<String, Program> programs;
    public final EditSetup edit;
    /** File name to its checksum entry (every file except the journal and the manifest). */
    public final Map<String, FileEntry> files;
    /** The bundle's chat template file ("chat.template_file"), or null: the model has none. */
    public final String chatTemplateFile;
    /** Chat answers go through the template by default ("chat.default"; the model profile's). */
    public final boolean chatDefault;
    /**
     * How edits are searched and judged ("recipe"); never null: manifests without one get
     * {@link Recipe#shippedFallback} ({@link Recipe#fromManifest} false).
     */
    public final Recipe recipe;

    Manifest(int formatVersion, String createdBy, String runtime, String modelFamily,
            String quantization, String editQuantization, int editLayer, String editModule,
            Dims dims, Shapes shapes, int slots, int bos, int eos, int pad,
            Map<String, Program> programs, EditSetup edit, Map<String, FileEntry> files,
            String chatTemplateFile, boolean chatDefault, Recipe recipe) {
        this.formatVersion = formatVersion;
        this.createdBy = createdBy;
        this.runtime = runtime;
        this.modelFamily = modelFamily;
        this.quantization = quantization;
        this.editQuantization = editQuantization;
        this.editLayer = editLayer;
        this.editModule = editModule;
        this.dims = dims;
        this.shapes = shapes;
        this.slots = slots;
        this.bos = bos;
        this.eos = eos;
        this.pad = pad;
        this.programs = Collections.unmodifiableMap(programs);
        this.edit = edit;
        this.files = Collections.unmodifiableMap(files);
        this.chatTemplateFile = chatTemplateFile;
        this.chatDefault = chatTemplateFile != null && chatDefault;
        this.recipe = recipe;
    }

    /** Length of the value delta = output size of the edited module (dims.d_out). */
    public int dOut() {
        return dims.dOut;
    }

    /** Input size of the edited module (dims.intermediate_size): the key length. */
    public int dIn() {
        return dims.intermediateSize;
    }

    /**
     * The id that pads prompt rows: {@code pad}, else {@code eos}, else 0 (the bundle tokenizer's
     * pad_token_id as mobiedit.export.tokenizer and build_edit_inputs resolve it).
     */
    public int padId() {
        return pad >= 0 ? pad : eos >= 0 ? eos : 0;
    }

    /** The program entry of a role ("prefill", "decode", "prefix", "edit"). */
    public Program program(String role) {
        Program p = programs.get(role);
        if (p == null) {
            throw ManifestFields.err("programs", "no program '" + role + "'",
                ManifestFields.REEXPORT);
        }
        return p;
    }
}
