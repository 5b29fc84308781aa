package dev.mobiedit.demo.core;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeSet;

/**
 * One journal.jsonl line, field for field mobiedit.journal.JournalEntry. {@link #fromJson}
 * applies the same checks as the Python reader (types, id >= 1, status, factors name, sha256
 * form, no unknown fields); {@link #toJson} gives the map the writer serialises.
 */
public final class JournalEntry {
    public static final int VERSION = 1;
    public static final String APPLIED = "applied";
    public static final String UNDONE = "undone";
    static final String RESTORE = "restore the journal folder from a backup";
    /** Field names and JSON kinds, in the dataclass order. */
    private static final String[][] FIELDS = {{"id", "int"}, {"request", "dict"},
        {"method", "str"}, {"module", "str"}, {"layer", "int"}, {"family", "str"},
        {"weight_out_in", "bool"}, {"d_out", "int"}, {"d_in", "int"}, {"factors", "str"},
        {"sha256", "str"}, {"base_sha256", "str"}, {"status", "str"}, {"timestamp", "str"},
        {"metrics", "dict?"}, {"config", "dict?"}, {"version", "int"}};

    public final long id;
    public final Map<String, Object> request;
    public final String method;
    public final String module;
    public final int layer;
    public final String family;
    public final boolean weightOutIn;
    public final int dOut;
    public final int dIn;
    public final String factors;
    public final String sha256;
    public final String baseSha256;
    public final String status;
    public final String timestamp;
    public final Map<String, Object> metrics;
    public final Map<String, Object> config;
    public final int version;

    @SuppressWarnings("unchecked")
    private JournalEntry(Map<String, Object> o) {
        id = (Long) o.get("id");
        request = (Map<String, Object>) o.get("request");
        method = (String) o.get("method");
        module = (String) o.get("module");
        layer = ((Long) o.get("layer")).intValue();
        family = (String) o.get("family");
        weightOutIn = (Boolean) o.get("weight_out_in");
        dOut = ((Long) o.get("d_out")).intValue();
        dIn = ((Long) o.get("d_in")).intValue();
        factors = (String) o.get("factors");
        sha256 = (String) o.get("sha256");
        baseSha256 = (String) o.get("base_sha256");
        status = (String) o.get("status");
        timestamp = (String) o.get("timestamp");
        metrics = (Map<String, Object>) o.get("metrics");
        config = (Map<String, Object>) o.get("config");
        version = ((Long) o.get("version")).intValue();
    }

    /** File name of an edit's factors: the only name an entry may reference. */
    public static String factorsName(long id) {
        return String.format(java.util.Locale.ROOT, "edit-%06d.safetensors", id);
    }

    /** True if the edit is applied (not undone). */
    public boolean isActive() {
        return APPLIED.equals(status);
    }

    /** A short label for lists: "#3 Danielle Darrieux -> English". */
    public String label() {
        Object s = request.get("subject");
        Object p = request.get("prompt");
        Object t = request.get("target_new");
        String text = (p instanceof String && s instanceof String)
            ? ((String) p).replace(EditRequest.SLOT, (String) s) : String.valueOf(s);
        return "#" + id + "  " + text + " → " + t;
    }

    /** Validate one parsed line ({@code where} = "path, line n"). */
    public static JournalEntry fromJson(Object obj, String where) {
        if (!(obj instanceof Map)) {
            throw new MobiEditError("line is a JSON " + Json.typeName(obj) + ", not an object", where,
                RESTORE);
        }
        @SuppressWarnings("unchecked")
        Map<String, Object> o = (Map<String, Object>) obj;
        if (o.get("id") instanceof Long) {
            where = where + " (edit " + o.get("id") + ")";
        }
        Set<String> known = new TreeSet<String>();
        for (String[] f : FIELDS) {
            known.add(f[0]);
            checkType(o, f[0], f[1], where);
        }
        Set<String> extra = new TreeSet<String>(o.keySet());
        extra.removeAll(known);
        long id = (Long) o.get("id");
        String factorsName = factorsName(id);
        Object[][] checks = {
            {"version", (Long) o.get("version") <= VERSION, "written by a newer mobiedit; upgrade"},
            {"id", id >= 1, "ids start at 1"},
            {"layer", (Long) o.get("layer") >= 0, "layer index must be >= 0"},
            {"d_out", (Long) o.get("d_out") >= 1 && (Long) o.get("d_in") >= 1,
                "sizes must be positive"},
            {"status", Arrays.asList(APPLIED, UNDONE).contains(o.get("status")),
                "status must be one of ('applied', 'undone')"},
            {"factors", factorsName.equals(o.get("factors")),
                "must be '" + factorsName + "' (no other paths are allowed)"},
            {"sha256", Sha256.isHex64((String) o.get("sha256")), "must be 64 lowercase hex digits"},
            {"base_sha256", Sha256.isHex64((String) o.get("base_sha256")),
                "must be 64 hex digits"},
            {extra.isEmpty() ? "" : extra.iterator().next(), extra.isEmpty(),
                "unknown field; written by a newer mobiedit?"}};
        for (Object[] c : checks) {
            if (!(Boolean) c[1]) {
                String name = (String) c[0];
                String shown = String.valueOf(o.get(name));
                throw new MobiEditError("invalid value " + (shown.length() > 200
                    ? shown.substring(0, 200) : shown), where + ", field '" + name + "'",
                    (String) c[2]);
            }
        }
        return new JournalEntry(o);
    }

    private static void checkType(Map<String, Object> o, String name, String kind, String where) {
        boolean optional = kind.endsWith("?");
        Object v = o.get(name);
        String w = where + ", field '" + name + "'";
        if (!o.containsKey(name) || (v == null && !optional)) {
            throw new MobiEditError("missing field", w, RESTORE);
        }
        if (v == null) {
            return;
        }
        boolean ok;
        if (kind.startsWith("dict")) {
            ok = v instanceof Map;
        } else if ("int".equals(kind)) {
            ok = v instanceof Long;
        } else if ("bool".equals(kind)) {
            ok = v instanceof Boolean;
        } else {
            ok = v instanceof String;
        }
        if (!ok) {
            throw new MobiEditError("must be " + kind.replace("?", " | None") + ", got "
                + Json.typeName(v), w, RESTORE);
        }
    }

    /** The JSON map of this entry (all fields). */
    public Map<String, Object> toJson() {
        Map<String, Object> m = new LinkedHashMap<String, Object>();
        m.put("id", id);
        m.put("request", request);
        m.put("method", method);
        m.put("module", module);
        m.put("layer", (long) layer);
        m.put("family", family);
        m.put("weight_out_in", weightOutIn);
        m.put("d_out", (long) dOut);
        m.put("d_in", (long) dIn);
        m.put("factors", factors);
        m.put("sha256", sha256);
        m.put("base_sha256", baseSha256);
        m.put("status", status);
        m.put("timestamp", timestamp);
        m.put("metrics", metrics);
        m.put("config", config);
        m.put("version", (long) version);
        return m;
    }

    /** This entry with another status. */
    public JournalEntry withStatus(String newStatus) {
        Map<String, Object> m = toJson();
        m.put("status", newStatus);
        return new JournalEntry(m);
    }

    /** Build a new entry from values (validated like a read line). */
    static JournalEntry create(Map<String, Object> values) {
        return fromJson(values, "new journal entry");
    }

    /** Field names in order (for tests and docs). */
    public static List<String> fieldNames() {
        String[] names = new String[FIELDS.length];
        for (int i = 0; i < FIELDS.length; i++) {
            names[i] = FIELDS[i][0];
        }
        return Arrays.asList(names);
    }

    /** Entries of a journal text; ids strictly increase and a module's rows agree. */
    static List<JournalEntry> parseAll(String text, String where) {
        List<JournalEntry> out = new ArrayList<JournalEntry>();
        if (text.length() == 0) {
            return out;
        }
        String[] lines = text.split("\n", -1);
        if (lines[lines.length - 1].length() != 0) {
            throw new MobiEditError("last line has no newline (torn or hand-edited)",
                where + ", line " + lines.length, RESTORE);
        }
        for (int n = 1; n < lines.length; n++) {
            String at = where + ", line " + n;
            JournalEntry e = fromJson(Json.parse(lines[n - 1], at), at);
            if (!out.isEmpty() && e.id <= out.get(out.size() - 1).id) {
                throw new MobiEditError("id " + e.id + " does not follow "
                    + out.get(out.size() - 1).id, at + ", field 'id'", "ids must strictly increase");
            }
            JournalEntry first = firstOn(out, e.module);
            if (first != null) {
                String bad = first.family.equals(e.family) ? null : "family";
                bad = bad != null ? bad : first.weightOutIn == e.weightOutIn ? null : "weight_out_in";
                bad = bad != null ? bad : first.dOut == e.dOut ? null : "d_out";
                bad = bad != null ? bad : first.dIn == e.dIn ? null : "d_in";
                bad = bad != null ? bad : first.baseSha256.equals(e.baseSha256) ? null : "base_sha256";
                if (bad != null) {
                    throw new MobiEditError("differs from edit " + first.id + " on the same module",
                        at + " (edit " + e.id + "), field '" + bad + "'", RESTORE);
                }
            }
            out.add(e);
        }
        return out;
    }

    /** The first entry of {@code list} on {@code module}, or null. */
    static JournalEntry firstOn(List<JournalEntry> list, String module) {
        for (JournalEntry e : list) {
            if (e.module.equals(module)) {
                return e;
            }
        }
        return null;
    }
}
