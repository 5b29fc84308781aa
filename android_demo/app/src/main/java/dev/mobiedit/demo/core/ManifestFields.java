package dev.mobiedit.demo.core;

import java.util.Map;

/**
 * The field checks of manifest.json. {@link #err} is the one definition of a manifest field
 * error: every error about a manifest field, wherever it is raised (the readers here,
 * {@link ManifestReader}, {@link RecipeReader}, {@link Manifest}, {@link EditPack},
 * {@link EditBatchBuilder} and the app's bundle checks), is built by it and so located as
 * {@code manifest.json, field '<field>'} ({@code field} the dotted path, e.g.
 * {@code edit.objective.kl_factor}) and carries a fix. The typed readers (package-private, used by
 * {@link ManifestReader} and {@link RecipeReader}) take the JSON object, the key inside it and the
 * field's full name; a value they refuse is one the exporter never writes, so their fix is
 * {@link #REEXPORT}.
 */
public final class ManifestFields {
    /** The fix for a manifest the exporter would not have written. */
    public static final String REEXPORT = "re-export the bundle with mobiedit export";

    private ManifestFields() {
    }

    /**
     * The error {@code msg} at {@code field} of manifest.json, with its {@code fix}: the one
     * definition of a manifest field error, located as {@code manifest.json, field '<field>'}.
     */
    public static MobiEditError err(String field, String msg, String fix) {
        return new MobiEditError(msg, ManifestReader.MANIFEST + ", field '" + field + "'", fix);
    }

    /** {@code o[key]}; "is missing" if absent or null. */
    static Object need(Map<String, Object> o, String key, String field) {
        if (!o.containsKey(key) || o.get(key) == null) {
            throw err(field, "is missing", REEXPORT);
        }
        return o.get(key);
    }

    /** Required non-blank text at top level ({@code field} is the key). */
    static String stringField(Map<String, Object> o, String field) {
        return stringField(o, field, field);
    }

    /** Required non-blank text {@code o[key]}, named {@code field} in errors. */
    static String stringField(Map<String, Object> o, String key, String field) {
        Object v = need(o, key, field);
        if (!(v instanceof String) || ((String) v).trim().length() == 0) {
            throw err(field, "must be non-empty text, got " + Json.typeName(v), REEXPORT);
        }
        return (String) v;
    }

    /** Required JSON object at top level ({@code field} is the key). */
    static Map<String, Object> objectField(Map<String, Object> o, String field) {
        return objectField(o, field, field);
    }

    /** Required JSON object {@code o[key]}, named {@code field} in errors. */
    @SuppressWarnings("unchecked")
    static Map<String, Object> objectField(Map<String, Object> o, String key, String field) {
        Object v = need(o, key, field);
        if (!(v instanceof Map)) {
            throw err(field, "must be an object, got " + Json.typeName(v), REEXPORT);
        }
        return (Map<String, Object>) v;
    }

    /** Required integer in [lo, hi] at top level ({@code field} is the key). */
    static int intField(Map<String, Object> o, String field, int lo, int hi) {
        return intField(o, field, field, lo, hi);
    }

    /** Required integer {@code o[key]} in [lo, hi], named {@code field} in errors. */
    static int intField(Map<String, Object> o, String key, String field, int lo, int hi) {
        Object v = need(o, key, field);
        if (!(v instanceof Long)) {
            throw err(field, "must be an integer, got " + Json.typeName(v), REEXPORT);
        }
        long x = (Long) v;
        if (x < lo || x > hi) {
            throw err(field, "is " + x + ", must be in [" + lo + ", " + hi + "]", REEXPORT);
        }
        return (int) x;
    }

    /** Optional finite number {@code o[key]} &gt;= lo; {@code dflt} if absent or null. */
    static double number(Map<String, Object> o, String key, double dflt, double lo, String field) {
        Object v = o.get(key);
        if (v == null) {
            return dflt;
        }
        if (!(v instanceof Long || v instanceof Double)) {
            throw err(field, "must be a number, got " + Json.typeName(v), REEXPORT);
        }
        double x = ((Number) v).doubleValue();
        if (!(x >= lo) || Double.isInfinite(x)) {
            throw err(field, "is " + x + ", must be a finite number >= " + lo, REEXPORT);
        }
        return x;
    }

    /** Optional boolean {@code o[key]}; {@code dflt} if absent or null. */
    static boolean bool(Map<String, Object> o, String key, boolean dflt, String field) {
        Object v = o.get(key);
        if (v == null) {
            return dflt;
        }
        if (!(v instanceof Boolean)) {
            throw err(field, "must be true or false, got " + Json.typeName(v), REEXPORT);
        }
        return (Boolean) v;
    }
}
