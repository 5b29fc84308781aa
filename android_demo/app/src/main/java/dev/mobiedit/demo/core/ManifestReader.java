package dev.mobiedit.demo.core;

import static dev.mobiedit.demo.core.ManifestFields.REEXPORT;
import static dev.mobiedit.demo.core.ManifestFields.bool;
import static dev.mobiedit.demo.core.ManifestFields.err;
import static dev.mobiedit.demo.core.ManifestFields.intField;
import static dev.mobiedit.demo.core.ManifestFields.number;
import static dev.mobiedit.demo.core.ManifestFields.objectField;
import static dev.mobiedit.demo.core.ManifestFields.stringField;

import java.io.File;
import java.io.IOException;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;

/**
 * Reads and validates manifest.json (docs/bundle_format.md; the rules of export/bundle.py
 * read_manifest and verify_files) and verifies the bundle's files.
 *
 * <p>Rules enforced: {@code format_version} not newer than {@link Manifest#FORMAT_VERSION};
 * {@code runtime} known; {@code slots >= 1}; every dims / shapes entry a positive integer
 * ({@code edit_tokens = edit_prefix + edit_suffix}); special tokens null or inside the
 * vocabulary; {@code edit_layer < num_layers}; the four programs present, each with its file
 * listed in {@code files}, a method (ExecuTorch) and its input / output names; file names without
 * a path separator or a leading dot; the edit setup (templates, objective) usable; the edit
 * recipe ({@link RecipeReader}; absent: the shipped fallback).
 * Every size is bounded like export/manifest_check.py ({@link #MAX_WIDTH} ... {@link #MAX_ELEMENTS}
 * elements for any one buffer sized from the manifest), so a hostile manifest cannot make the
 * app allocate without bound.
 * {@link #verifyFiles} checks each file's size and sha256 before anything runs. Every error names
 * the field and the fix ({@link ManifestFields}, the typed field checks shared with the recipe).
 */
public final class ManifestReader {
    /** Name of the manifest inside a bundle folder. */
    public static final String MANIFEST = "manifest.json";
    private static final List<String> QUANTIZATIONS =
        Arrays.asList("fp32", "8da8w", "8da4w", "qdq_a16w8");
    private static final List<String> EDIT_QUANTIZATIONS =
        Arrays.asList("fp32", "delta", "w8", "8da8w", "8da4w", "qdq_a16w8", "nbits");
    /** Bounds of export/manifest_check.py: a hostile manifest must not size a huge allocation. */
    static final int MAX_WIDTH = 1 << 17;
    static final int MAX_VOCAB = 1 << 22;
    static final int MAX_LAYERS = 1 << 10;
    static final int MAX_SHAPE = 1 << 16;
    static final int MAX_SLOTS = 1 << 12;
    /** Elements of any one buffer the app allocates from the manifest (1 GiB of float32). */
    static final long MAX_ELEMENTS = 1L << 28;
    static final long MAX_FILE_BYTES = 1L << 40;

    private ManifestReader() {
    }

    /** Progress of {@link #verifyFiles}: called before each file is hashed. */
    public interface Progress {
        void checking(String name, int index, int count);
    }

    /** Read {@code bundle}/manifest.json, validate it and verify every listed file. */
    public static Manifest open(File bundle, Progress progress) {
        File f = new File(bundle, MANIFEST);
        if (!f.isFile()) {
            throw new MobiEditError("no " + MANIFEST + " in " + bundle, bundle.getPath(),
                "pick the folder written by `mobiedit export` (copy it whole, e.g. adb push)");
        }
        String text;
        try {
            text = Files2.readText(f);
        } catch (IOException e) {
            throw new MobiEditError("cannot read (" + e.getMessage() + ")", f.getPath(),
                "check the file permissions", e);
        }
        Manifest m = parse(text);
        verifyFiles(bundle, m, progress);
        return m;
    }

    /** Parse and validate manifest text (no file checks). */
    public static Manifest parse(String text) {
        Map<String, Object> o = Json.parseObject(text, MANIFEST);
        int version = intField(o, "format_version", 1, Integer.MAX_VALUE);
        if (version > Manifest.FORMAT_VERSION) {
            throw err("format_version", "is " + version + ", this app reads up to "
                + Manifest.FORMAT_VERSION, "upgrade the MobiEdit demo app");
        }
        String runtime = stringField(o, "runtime");
        if (!runtime.equals(Manifest.RUNTIME_EXECUTORCH) && !runtime.equals(Manifest.RUNTIME_ONNX)) {
            throw err("runtime", "unknown runtime '" + runtime + "'",
                "use 'executorch' or 'onnxruntime' (mobiedit export --runtime)");
        }
        String quant = stringField(o, "quantization");
        if (!QUANTIZATIONS.contains(quant)) {
            throw err("quantization", "unknown value '" + quant + "'", "use one of " + QUANTIZATIONS);
        }
        String editQuant = quant;
        if (o.get("edit_quantization") != null) {
            editQuant = stringField(o, "edit_quantization");
            if (!EDIT_QUANTIZATIONS.contains(editQuant)) {
                throw err("edit_quantization", "unknown value '" + editQuant + "'",
                    "use one of " + EDIT_QUANTIZATIONS);
            }
        }
        Map<String, Object> d = objectField(o, "dims");
        Manifest.Dims dims = new Manifest.Dims(pos(d, "dims", "vocab_size", MAX_VOCAB),
            pos(d, "dims", "hidden_size", MAX_WIDTH), pos(d, "dims", "intermediate_size", MAX_WIDTH),
            pos(d, "dims", "d_out", MAX_WIDTH), pos(d, "dims", "num_layers", MAX_LAYERS),
            pos(d, "dims", "num_heads", MAX_LAYERS), pos(d, "dims", "num_kv_heads", MAX_LAYERS),
            pos(d, "dims", "head_dim", MAX_WIDTH));
        Manifest.Shapes shapes = shapes(objectField(o, "shapes"));
        int layer = intField(o, "edit_layer", 0, dims.numLayers - 1);
        int slots = intField(o, "slots", 1, MAX_SLOTS);
        checkBuffers(dims, shapes, slots);
        Map<String, Object> st = objectField(o, "special_tokens");
        int v = dims.vocabSize - 1;
        int bos = token(st, "bos", v);
        int eos = token(st, "eos", v);
        int pad = token(st, "pad", v);
        Map<String, Manifest.FileEntry> files = files(objectField(o, "files"));
        Map<String, Manifest.Program> programs = programs(objectField(o, "programs"), files,
            runtime);
        String family = stringField(o, "model_family");
        Manifest.EditSetup edit = edit(objectField(o, "edit"), family, shapes);
        String createdBy = o.get("created_by") instanceof String ? (String) o.get("created_by") : "";
        Object chat = o.get("chat");
        String chatFile = null;
        boolean chatDefault = false;
        if (chat != null) {
            Map<String, Object> c = objectField(o, "chat");
            Object tf = c.get("template_file");
            if (!(tf instanceof String) || !files.containsKey(tf)) {
                throw err("chat.template_file", "names " + tf + ", which is not listed in 'files'",
                    REEXPORT);
            }
            if (!(c.get("default") instanceof Boolean)) {
                throw err("chat.default", "must be true or false", REEXPORT);
            }
            chatFile = (String) tf;
            chatDefault = (Boolean) c.get("default");
        }
        return new Manifest(version, createdBy, runtime, family, quant, editQuant, layer,
            stringField(o, "edit_module"), dims, shapes, slots, bos, eos, pad, programs, edit,
            files, chatFile, chatDefault, RecipeReader.read(o, dims, shapes));
    }

    /** Check every "files" entry: present, size equal to "bytes", sha256 equal. */
    public static void verifyFiles(File bundle, Manifest m, Progress progress) {
        int i = 0;
        for (Map.Entry<String, Manifest.FileEntry> e : m.files.entrySet()) {
            String name = e.getKey();
            if (progress != null) {
                progress.checking(name, i, m.files.size());
            }
            i++;
            File f = new File(bundle, name);
            String where = MANIFEST + ", files['" + name + "']";
            if (!f.isFile()) {
                throw new MobiEditError("file is missing from the bundle", where,
                    "copy the whole bundle folder again");
            }
            if (f.length() != e.getValue().bytes) {
                throw new MobiEditError("size is " + f.length() + " bytes, manifest says "
                    + e.getValue().bytes, where, "the copy is incomplete: copy the bundle again");
            }
            String got;
            try {
                got = Sha256.hexOfFile(f);
            } catch (IOException ex) {
                throw new MobiEditError("cannot read (" + ex.getMessage() + ")", where,
                    "check the file permissions", ex);
            }
            if (!got.equals(e.getValue().sha256)) {
                throw new MobiEditError("sha256 mismatch (file is corrupt or was changed)",
                    where + ", field 'sha256'", "copy the bundle again or " + REEXPORT);
            }
        }
    }

    /** Refuse sizes that are each in range but together imply a buffer over MAX_ELEMENTS. */
    private static void checkBuffers(Manifest.Dims d, Manifest.Shapes s, int slots) {
        long[] sizes = {
            (long) slots * Math.max(d.dOut, d.intermediateSize),
            2L * d.numLayers * d.numKvHeads * s.maxSeqLen * d.headDim,
            (long) d.intermediateSize * d.intermediateSize,
            (long) s.editRows * s.editTokens() * d.hiddenSize * 2L * d.numLayers};
        String[] fields = {"slots", "shapes.max_seq_len", "dims.intermediate_size", "shapes.edit_rows"};
        for (int i = 0; i < sizes.length; i++) {
            if (sizes[i] > MAX_ELEMENTS) {
                throw err(fields[i], "implies a buffer of " + sizes[i] + " elements (limit "
                    + MAX_ELEMENTS + ")", REEXPORT);
            }
        }
    }

    private static Manifest.Shapes shapes(Map<String, Object> s) {
        Manifest.Shapes shapes = new Manifest.Shapes(pos(s, "shapes", "max_seq_len", MAX_SHAPE),
            pos(s, "shapes", "prefill_chunk", MAX_SHAPE), pos(s, "shapes", "edit_K", MAX_SHAPE),
            pos(s, "shapes", "edit_rows", MAX_SHAPE), pos(s, "shapes", "edit_suffix", MAX_SHAPE),
            pos(s, "shapes", "edit_prefix", MAX_SHAPE), pos(s, "shapes", "edit_targets", MAX_SHAPE),
            pos(s, "shapes", "edit_kl", MAX_SHAPE));
        if (s.get("edit_tokens") != null
                && pos(s, "shapes", "edit_tokens", 2 * MAX_SHAPE) != shapes.editTokens()) {
            throw err("shapes.edit_tokens", "is " + s.get("edit_tokens") + ", expected edit_prefix"
                + " + edit_suffix = " + shapes.editTokens(), REEXPORT);
        }
        if (shapes.prefillChunk > shapes.maxSeqLen) {
            throw err("shapes.prefill_chunk", "is larger than max_seq_len " + shapes.maxSeqLen,
                REEXPORT);
        }
        if (shapes.editKl >= shapes.editRows) {
            throw err("shapes.edit_kl", "must be < edit_rows (" + shapes.editRows + ")", REEXPORT);
        }
        return shapes;
    }

    private static Map<String, Manifest.FileEntry> files(Map<String, Object> raw) {
        Map<String, Manifest.FileEntry> out = new LinkedHashMap<String, Manifest.FileEntry>();
        for (Map.Entry<String, Object> e : raw.entrySet()) {
            String name = e.getKey();
            String where = "files['" + name + "']";
            if (name.length() == 0 || name.contains("/") || name.contains("\\")
                    || name.startsWith(".") || name.equals(MANIFEST)) {
                throw err(where, "is not a plain file name inside the bundle",
                    "list bundle-relative names without a path separator or a leading dot (the"
                        + " journal and the manifest are never listed)");
            }
            if (!(e.getValue() instanceof Map)) {
                throw err(where, "must be an object {\"sha256\": ..., \"bytes\": ...}", REEXPORT);
            }
            @SuppressWarnings("unchecked")
            Map<String, Object> f = (Map<String, Object>) e.getValue();
            Object sha = f.get("sha256");
            if (!(sha instanceof String) || !Sha256.isHex64((String) sha)) {
                throw err(where + ".sha256", "must be 64 lowercase hex digits", REEXPORT);
            }
            Object bytes = f.get("bytes");
            if (!(bytes instanceof Long) || (Long) bytes < 0 || (Long) bytes > MAX_FILE_BYTES) {
                throw err(where + ".bytes", "must be an integer in [0, " + MAX_FILE_BYTES + "]",
                    REEXPORT);
            }
            out.put(name, new Manifest.FileEntry((String) sha, (Long) bytes));
        }
        return out;
    }

    @SuppressWarnings("unchecked")
    private static Map<String, Manifest.Program> programs(Map<String, Object> raw,
            Map<String, Manifest.FileEntry> files, String runtime) {
        for (Map.Entry<String, Object> e : raw.entrySet()) {
            Object spec = e.getValue();
            Object f = spec instanceof Map ? ((Map<String, Object>) spec).get("file") : null;
            if (!(f instanceof String) || !files.containsKey(f)) {
                throw err("programs." + e.getKey() + ".file", f == null
                    ? "is missing (each program is {\"file\", \"method\", \"inputs\", \"outputs\"})"
                    : "names '" + f + "', which is not listed in 'files'",
                    REEXPORT + " (every program must carry a checksum)");
            }
        }
        Map<String, Manifest.Program> out = new LinkedHashMap<String, Manifest.Program>();
        for (String role : Manifest.PROGRAMS) {
            String field = "programs." + role;
            Object spec = raw.get(role);
            if (!(spec instanceof Map)) {
                throw err(field, spec == null ? "is missing" : "must be an object {\"file\","
                    + " \"method\", \"inputs\", \"outputs\"}, got " + Json.typeName(spec), REEXPORT);
            }
            Map<String, Object> p = (Map<String, Object>) spec;
            Object method = p.get("method");
            if (method != null && (!(method instanceof String) || ((String) method).length() == 0)) {
                throw err(field + ".method", "must be a method name or null", REEXPORT);
            }
            if (method == null && Manifest.RUNTIME_EXECUTORCH.equals(runtime)) {
                throw err(field + ".method", "is missing: an ExecuTorch program names its .pte"
                    + " method", REEXPORT);
            }
            out.put(role, new Manifest.Program(role, (String) p.get("file"), (String) method,
                names(p, field, "inputs"), names(p, field, "outputs")));
        }
        return out;
    }

    @SuppressWarnings("unchecked")
    private static List<String> names(Map<String, Object> p, String field, String key) {
        Object v = p.get(key);
        if (!(v instanceof List) || ((List<Object>) v).isEmpty()) {
            throw err(field + "." + key, "must be a non-empty list of tensor names", REEXPORT);
        }
        List<String> out = new ArrayList<String>();
        Set<String> seen = new HashSet<String>();
        for (Object n : (List<Object>) v) {
            if (!(n instanceof String) || ((String) n).length() == 0 || !seen.add((String) n)) {
                throw err(field + "." + key, "has a missing, empty or repeated name (" + n + ")",
                    REEXPORT);
            }
            out.add((String) n);
        }
        return out;
    }

    @SuppressWarnings("unchecked")
    private static Manifest.EditSetup edit(Map<String, Object> e, String family,
            Manifest.Shapes shapes) {
        Object t = e.get("templates");
        if (!(t instanceof List) || ((List<Object>) t).isEmpty()) {
            throw err("edit.templates", "must be a non-empty list of context templates", REEXPORT);
        }
        List<String> templates = new ArrayList<String>();
        for (Object x : (List<Object>) t) {
            if (!(x instanceof String) || !((String) x).contains(EditRequest.SLOT)) {
                throw err("edit.templates", "entry " + Json.writeCompact(x)
                    + " is not a text with a '{}' slot", REEXPORT);
            }
            templates.add((String) x);
        }
        if (templates.size() + 1 > shapes.editRows) {
            throw err("edit.templates", templates.size() + " templates + 1 KL prompt need "
                + (templates.size() + 1) + " rows, shapes.edit_rows is " + shapes.editRows,
                REEXPORT);
        }
        Manifest.Objective d = Manifest.Objective.rome();
        Manifest.Objective objective = d;
        if (e.get("objective") != null) {
            Map<String, Object> ob = objectField(e, "objective", "edit.objective");
            String kl = ob.get("kl_prompt") == null ? d.klPrompt
                : stringField(ob, "kl_prompt", "edit.objective.kl_prompt");
            int slot = kl.indexOf(EditRequest.SLOT);
            if (slot < 0 || kl.indexOf(EditRequest.SLOT, slot + 1) >= 0) {
                throw err("edit.objective.kl_prompt", "must contain exactly one '{}'", REEXPORT);
            }
            objective = new Manifest.Objective(
                number(ob, "kl_factor", d.klFactor, 0, "edit.objective.kl_factor"), kl,
                number(ob, "weight_decay", d.weightDecay, 0, "edit.objective.weight_decay"),
                number(ob, "clamp_norm_factor", d.clampNormFactor, Double.MIN_VALUE,
                    "edit.objective.clamp_norm_factor"));
        }
        boolean mom2 = bool(e, "mom2", true, "edit.mom2");
        double ridge = number(e, "ridge", 1e-4, 0, "edit.ridge");
        boolean outIn = bool(e, "weight_out_in", !"gpt2".equals(family), "edit.weight_out_in");
        String rule = Manifest.EditSetup.RULE_ROME;
        double rowsRidge = Manifest.EditSetup.DEFAULT_ROWS_RIDGE;
        double editedWeight = 1.0;
        if (e.get("update") != null) { // optional: written since session 28
            Map<String, Object> u = objectField(e, "update", "edit.update");
            for (String key : u.keySet()) {
                if (!"rule".equals(key) && !"rows_ridge".equals(key) && !"edited_weight".equals(key)) {
                    throw err("edit.update." + key, "unknown field", REEXPORT);
                }
            }
            if (u.get("rule") != null) {
                rule = stringField(u, "rule", "edit.update.rule");
                if (!Manifest.EditSetup.UPDATE_RULES.contains(rule)) {
                    throw err("edit.update.rule", "is '" + rule + "', must be one of "
                        + Manifest.EditSetup.UPDATE_RULES, REEXPORT);
                }
            }
            rowsRidge = number(u, "rows_ridge", rowsRidge, Double.MIN_VALUE, "edit.update.rows_ridge");
            editedWeight = number(u, "edited_weight", editedWeight, Double.MIN_VALUE,
                "edit.update.edited_weight");
        }
        return new Manifest.EditSetup(templates, objective, mom2, ridge, outIn, rule, rowsRidge,
            editedWeight);
    }

    private static int pos(Map<String, Object> o, String parent, String key, int hi) {
        return intField(o, key, parent + "." + key, 1, hi);
    }

    /** A special token id: null (or absent) gives -1, else an id in [0, maxId]. */
    private static int token(Map<String, Object> o, String key, int maxId) {
        if (o.get(key) == null) {
            return -1;
        }
        return intField(o, key, "special_tokens." + key, 0, maxId);
    }
}
