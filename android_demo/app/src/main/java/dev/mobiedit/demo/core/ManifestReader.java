package dev.mobiedit.demo.core;

import java.io.File;
import java.io.IOException;
import java.util.Arrays;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/**
 * Reads and validates manifest.json (docs/bundle_format.md) and verifies the bundle's files.
 *
 * <p>Rules enforced: {@code format_version} not newer than {@link Manifest#FORMAT_VERSION};
 * {@code runtime} known; {@code slots >= 1}; every dims / shapes entry a positive integer;
 * special tokens inside the vocabulary; {@code edit_layer < num_layers}; every program listed in
 * {@code files}; file names relative without "..". {@link #verifyFiles} checks each file's size
 * and sha256 before anything runs. Every error names the field and the fix.
 */
public final class ManifestReader {
    /** Name of the manifest inside a bundle folder. */
    public static final String MANIFEST = "manifest.json";
    private static final String WHERE = "manifest.json";
    private static final List<String> QUANTIZATIONS =
        Arrays.asList("fp32", "8da8w", "8da4w", "qdq_a16w8");
    private static final String REEXPORT = "re-export the bundle with mobiedit export";

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
        Map<String, Object> o = Json.parseObject(text, WHERE);
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
        Map<String, Object> d = objectField(o, "dims");
        Manifest.Dims dims = new Manifest.Dims(pos(d, "dims", "vocab_size"),
            pos(d, "dims", "hidden_size"), pos(d, "dims", "intermediate_size"),
            pos(d, "dims", "num_layers"), pos(d, "dims", "num_heads"),
            pos(d, "dims", "num_kv_heads"), pos(d, "dims", "head_dim"));
        Map<String, Object> s = objectField(o, "shapes");
        Manifest.Shapes shapes = new Manifest.Shapes(pos(s, "shapes", "max_seq_len"),
            pos(s, "shapes", "prefill_chunk"), pos(s, "shapes", "edit_K"),
            pos(s, "shapes", "edit_rows"), pos(s, "shapes", "edit_suffix"),
            pos(s, "shapes", "edit_prefix"), pos(s, "shapes", "edit_readouts"));
        int layer = intField(o, "edit_layer", 0, dims.numLayers - 1);
        int slots = intField(o, "slots", 1, 4096);
        Map<String, Object> st = objectField(o, "special_tokens");
        int v = dims.vocabSize - 1;
        int bos = sub(st, "special_tokens", "bos", 0, v);
        int eos = sub(st, "special_tokens", "eos", 0, v);
        int pad = sub(st, "special_tokens", "pad", 0, v);
        Map<String, Manifest.FileEntry> files = files(objectField(o, "files"));
        Map<String, String> programs = programs(objectField(o, "programs"), files);
        String createdBy = o.get("created_by") instanceof String ? (String) o.get("created_by") : "";
        return new Manifest(version, createdBy, runtime, stringField(o, "model_family"), quant,
            layer, stringField(o, "edit_module"), dims, shapes, slots, bos, eos, pad, programs,
            files);
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
            String where = WHERE + ", files['" + name + "']";
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

    private static Map<String, Manifest.FileEntry> files(Map<String, Object> raw) {
        Map<String, Manifest.FileEntry> out = new LinkedHashMap<String, Manifest.FileEntry>();
        for (Map.Entry<String, Object> e : raw.entrySet()) {
            String name = e.getKey();
            String where = "files['" + name + "']";
            if (name.length() == 0 || name.startsWith("/") || name.contains("..")
                    || name.contains("\\") || name.startsWith("journal/")) {
                throw err(where, "is not a plain file name inside the bundle",
                    "list bundle-relative names without '..' (the journal is never listed)");
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
            if (!(bytes instanceof Long) || (Long) bytes < 0) {
                throw err(where + ".bytes", "must be an integer >= 0", REEXPORT);
            }
            out.put(name, new Manifest.FileEntry((String) sha, (Long) bytes));
        }
        return out;
    }

    private static Map<String, String> programs(Map<String, Object> raw,
            Map<String, Manifest.FileEntry> files) {
        Map<String, String> out = new LinkedHashMap<String, String>();
        for (String name : Manifest.PROGRAMS) {
            Object f = raw.get(name);
            if (!(f instanceof String) || ((String) f).length() == 0) {
                throw err("programs." + name, "is missing", REEXPORT);
            }
            if (!files.containsKey(f)) {
                throw err("programs." + name, "names '" + f + "', which is not listed in 'files'",
                    REEXPORT + " (every program must carry a checksum)");
            }
            out.put(name, (String) f);
        }
        return out;
    }

    private static MobiEditError err(String field, String msg, String fix) {
        return new MobiEditError(msg, WHERE + ", field '" + field + "'", fix);
    }

    private static Object need(Map<String, Object> o, String field) {
        if (!o.containsKey(field) || o.get(field) == null) {
            throw err(field, "is missing", REEXPORT);
        }
        return o.get(field);
    }

    private static String stringField(Map<String, Object> o, String field) {
        Object v = need(o, field);
        if (!(v instanceof String) || ((String) v).trim().length() == 0) {
            throw err(field, "must be non-empty text, got " + Json.typeName(v), REEXPORT);
        }
        return (String) v;
    }

    @SuppressWarnings("unchecked")
    private static Map<String, Object> objectField(Map<String, Object> o, String field) {
        Object v = need(o, field);
        if (!(v instanceof Map)) {
            throw err(field, "must be an object, got " + Json.typeName(v), REEXPORT);
        }
        return (Map<String, Object>) v;
    }

    private static int intField(Map<String, Object> o, String field, int lo, int hi) {
        Object v = need(o, field);
        if (!(v instanceof Long)) {
            throw err(field, "must be an integer, got " + Json.typeName(v), REEXPORT);
        }
        long x = (Long) v;
        if (x < lo || x > hi) {
            throw err(field, "is " + x + ", must be in [" + lo + ", " + hi + "]", REEXPORT);
        }
        return (int) x;
    }

    private static int pos(Map<String, Object> o, String parent, String field) {
        return sub(o, parent, field, 1, Integer.MAX_VALUE);
    }

    private static int sub(Map<String, Object> o, String parent, String field, int lo, int hi) {
        try {
            return intField(o, field, lo, hi);
        } catch (MobiEditError e) {
            throw new MobiEditError(e.detail(), WHERE + ", field '" + parent + "." + field + "'",
                e.fix());
        }
    }
}
