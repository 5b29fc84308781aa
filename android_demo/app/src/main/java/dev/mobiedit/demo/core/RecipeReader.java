package dev.mobiedit.demo.core;

import static dev.mobiedit.demo.core.ManifestFields.REEXPORT;
import static dev.mobiedit.demo.core.ManifestFields.err;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collections;
import java.util.List;
import java.util.Map;

/**
 * Reads and validates the manifest's {@code recipe} for {@link ManifestReader} (the rules of
 * export/recipe.py check_recipe and export/manifest_check.py): exactly the fields {@code zo}
 * (every ZOConfig field but max_norm) and {@code success} ({@code fraction}, {@code nll}, optionally
 * {@code stop_on}: one of {@link Recipe#STOP_ON}, absent {@link Recipe#STOP_LOOP}), each of
 * its type and within ZOConfig's ranges, a seed that fits a long, and a search buffer (K * d_out
 * floats) within {@link ManifestReader#MAX_ELEMENTS}; optionally {@code ladder}, exactly
 * {@code fractions} (a list of 1 to {@link Recipe#MAX_RUNGS} finite positive numbers, strictly
 * increasing) and {@code from_edits} (an integer &gt;= 1), export/recipe.py {@code _ladder};
 * without it the recipe gets {@link Recipe#DEFAULT_LADDER} from
 * {@link Recipe#DEFAULT_LADDER_FROM_EDITS} edits; optionally {@code settle} ({@link #settle}),
 * absent {@link Recipe.Settle#OFF}. A manifest without {@code recipe} (exported before it was written) gets
 * {@link Recipe#shippedFallback}. Every error names the field {@code recipe.…} and the fix
 * ({@link ManifestFields#err}).
 */
final class RecipeReader {
    /** The recipe's zo fields, as export/recipe.py ZO_FIELDS. */
    static final List<String> ZO_FIELDS = Arrays.asList("estimator", "n_dirs", "h", "optimizer",
        "lr", "lr_min", "lr_schedule", "momentum", "beta1", "beta2", "adam_eps", "max_steps",
        "max_evals", "check_every", "loss_tol", "patience", "min_rel_improve", "seed");
    /**
     * Optional in {@code recipe.zo} (absent in bundles exported before they were written:
     * directions iid, normalise spread, check_at update).
     */
    static final List<String> ZO_OPTIONAL = Arrays.asList("directions", "normalise", "check_at");
    static final List<String> SUCCESS_FIELDS = Arrays.asList("fraction", "nll");
    /** Optional in {@code recipe.success} (absent in bundles exported before it was written). */
    static final List<String> SUCCESS_OPTIONAL = Arrays.asList("stop_on");
    static final List<String> LADDER_FIELDS = Arrays.asList("fractions", "from_edits");
    /** {@code recipe.settle}'s fields, as export/recipe.py SETTLE_FIELDS. */
    static final List<String> SETTLE_FIELDS = Arrays.asList("rounds", "shrink", "steps");
    private static final String LADDER_FIX = "e.g. [0.5, 0.75, 1.0] (fractions of"
        + " edit.objective.clamp_norm_factor, smallest first), or [1.0] for none";
    private static final String FIX = REEXPORT + " (it writes the shipped recipe)";
    private static final long INT32_MAX = Integer.MAX_VALUE;

    private RecipeReader() {
    }

    /** The manifest's recipe, or the shipped fallback when {@code o} has no "recipe". */
    static Recipe read(Map<String, Object> o, Manifest.Dims dims, Manifest.Shapes shapes) {
        if (!o.containsKey("recipe")) {
            return Recipe.shippedFallback(shapes.editK);
        }
        Map<String, Object> r = section(o.get("recipe"), "recipe", Arrays.asList("zo", "success"),
            Arrays.asList("ladder", "settle"));
        Map<String, Object> z = section(r.get("zo"), "recipe.zo", ZO_FIELDS, ZO_OPTIONAL);
        String estimator = choice(z, "estimator", Recipe.ESTIMATORS);
        long nDirs = integer(z, "n_dirs", 1, 1 << 20);
        double h = real(z, "h", 0, true, Double.POSITIVE_INFINITY, true);
        String optimizer = choice(z, "optimizer", Recipe.OPTIMIZERS);
        double lr = real(z, "lr", 0, true, Double.POSITIVE_INFINITY, true);
        double lrMin = real(z, "lr_min", 0, false, lr, false);
        String schedule = choice(z, "lr_schedule", Recipe.SCHEDULES);
        double momentum = real(z, "momentum", 0, false, 1, true);
        double beta1 = real(z, "beta1", 0, false, 1, true);
        double beta2 = real(z, "beta2", 0, false, 1, true);
        double adamEps = real(z, "adam_eps", 0, true, Double.POSITIVE_INFINITY, true);
        long maxSteps = integer(z, "max_steps", 1, INT32_MAX);
        long rows = Recipe.rows(estimator, nDirs);
        long maxEvals = integer(z, "max_evals", rows, Long.MAX_VALUE);
        long checkEvery = integer(z, "check_every", 1, INT32_MAX);
        double lossTol = real(z, "loss_tol", 0, false, Double.POSITIVE_INFINITY, true);
        long patience = integer(z, "patience", 0, INT32_MAX);
        double minRel = real(z, "min_rel_improve", 0, false, 1, true);
        long seed = integer(z, "seed", 0, Long.MAX_VALUE);
        String directions = z.containsKey("directions") ? choice(z, "directions", Recipe.DIRECTIONS)
            : Recipe.DIRECTIONS[0];
        String normalise = z.containsKey("normalise") ? choice(z, "normalise", Recipe.NORMALISE)
            : Recipe.NORMALISE[0];
        String checkAt = z.containsKey("check_at") ? choice(z, "check_at", Recipe.CHECK_AT)
            : Recipe.CHECK_AT[0];
        if ("gradient".equals(normalise)
                && !("fzoo".equals(estimator) && "coordinates".equals(directions))) {
            throw err("recipe.zo.normalise", "is \"gradient\", which needs estimator \"fzoo\" on"
                + " directions \"coordinates\" (got \"" + estimator + "\" on \"" + directions + "\")",
                "set recipe.zo.estimator to fzoo and recipe.zo.directions to coordinates, or"
                + " normalise to spread");
        }
        if (rows * dims.dOut > ManifestReader.MAX_ELEMENTS) {
            throw err("recipe.zo.n_dirs", "implies a buffer of " + rows + " x " + dims.dOut
                + " elements (limit " + ManifestReader.MAX_ELEMENTS + ")", "use fewer directions");
        }
        Map<String, Object> s = section(r.get("success"), "recipe.success", SUCCESS_FIELDS,
            SUCCESS_OPTIONAL);
        double fraction = real(s, "fraction", "recipe.success.fraction", 0, false, 1, false);
        double nll = real(s, "nll", "recipe.success.nll", 0, true, Double.POSITIVE_INFINITY, true);
        String stopOn = stopOn(s);
        List<Double> ladder = Recipe.DEFAULT_LADDER;
        long fromEdits = Recipe.DEFAULT_LADDER_FROM_EDITS;
        if (r.containsKey("ladder")) {
            Map<String, Object> lad = section(r.get("ladder"), "recipe.ladder", LADDER_FIELDS);
            ladder = fractions(lad.get("fractions"));
            fromEdits = fromEdits(lad.get("from_edits"));
        }
        Recipe.Settle settle = r.containsKey("settle") ? settle(r.get("settle")) : Recipe.Settle.OFF;
        return new Recipe(estimator, (int) nDirs, h, optimizer, lr, lrMin, schedule, momentum,
            beta1, beta2, adamEps, maxSteps, maxEvals, checkEvery, lossTol, patience, minRel, seed,
            fraction, nll, true, ladder, fromEdits, stopOn, directions, normalise, checkAt, settle);
    }

    /**
     * {@code recipe.settle} (export/recipe.py {@code _settle}, mobiedit/recipes.py Settle): exactly
     * {@code rounds} (an integer in [0, 100]), {@code shrink} (a number in (0, 1)) and
     * {@code steps} (an integer in [0, 10000], at least 1 when rounds &gt; 0).
     */
    private static Recipe.Settle settle(Object v) {
        Map<String, Object> s = section(v, "recipe.settle", SETTLE_FIELDS);
        long rounds = integer(s, "rounds", "recipe.settle.rounds", 0, 100);
        double shrink = real(s, "shrink", "recipe.settle.shrink", 0, true, 1, true);
        long steps = integer(s, "steps", "recipe.settle.steps", rounds > 0 ? 1 : 0, 10000);
        return new Recipe.Settle((int) rounds, shrink, steps);
    }

    /**
     * {@code recipe.ladder.fractions}: a list of 1 to {@link Recipe#MAX_RUNGS} numbers (a
     * non-number names its index), finite, positive and strictly increasing.
     */
    private static List<Double> fractions(Object v) {
        String field = "recipe.ladder.fractions";
        if (!(v instanceof List) || ((List<?>) v).isEmpty()
                || ((List<?>) v).size() > Recipe.MAX_RUNGS) {
            String got = v instanceof List ? ((List<?>) v).size() + " entries" : Json.typeName(v);
            throw err(field, "must be a list of 1 to " + Recipe.MAX_RUNGS + " numbers, got " + got,
                LADDER_FIX);
        }
        List<?> list = (List<?>) v;
        List<Double> out = new ArrayList<Double>();
        for (int i = 0; i < list.size(); i++) {
            Object f = list.get(i);
            if (!(f instanceof Long || f instanceof Double)) {
                throw err(field + "[" + i + "]", "must be a number, got " + Json.typeName(f),
                    LADDER_FIX);
            }
            double x = ((Number) f).doubleValue();
            if (Double.isNaN(x) || Double.isInfinite(x)) {
                throw err(field + "[" + i + "]", "must be a finite number", LADDER_FIX);
            }
            out.add(x);
        }
        for (int i = 0; i < out.size(); i++) {
            if (!(out.get(i) > 0) || (i > 0 && !(out.get(i) > out.get(i - 1)))) {
                throw err(field, "is " + out + ": must be increasing positive factors", LADDER_FIX);
            }
        }
        return out;
    }

    /**
     * {@code recipe.success.stop_on}: one of {@link Recipe#STOP_ON}; absent (bundles exported
     * before it was written) {@link Recipe#STOP_LOOP}, the search as it was then.
     */
    private static String stopOn(Map<String, Object> s) {
        if (!s.containsKey("stop_on")) {
            return Recipe.STOP_LOOP;
        }
        Object v = s.get("stop_on");
        if (!(v instanceof String) || !Recipe.STOP_ON.contains(v)) {
            String got = v == null ? "null" : Json.writeCompact(v);
            got = got.length() > 40 ? got.substring(0, 40) + "..." : got;
            throw err("recipe.success.stop_on", "is " + got + ", not one of " + Recipe.STOP_ON,
                "use \"written\" (stop where the written edit holds) or \"loop\", or re-export"
                + " the bundle");
        }
        return (String) v;
    }

    /** {@code recipe.ladder.from_edits}: an integer &gt;= 1. */
    private static long fromEdits(Object v) {
        String field = "recipe.ladder.from_edits";
        String fix = "e.g. 2 (climb once the bundle carries two edits)";
        if (!(v instanceof Long)) {
            throw err(field, "must be an integer, got " + Json.typeName(v), fix);
        }
        if ((Long) v < 1) {
            throw err(field, "is " + v + ", must be at least 1", fix);
        }
        return (Long) v;
    }

    /** {@code v} as an object with exactly the keys {@code names}. */
    private static Map<String, Object> section(Object v, String field, List<String> names) {
        return section(v, field, names, Collections.<String>emptyList());
    }

    /** {@code v} as an object with exactly the keys {@code names}, and any of {@code optional}. */
    @SuppressWarnings("unchecked")
    private static Map<String, Object> section(Object v, String field, List<String> names,
            List<String> optional) {
        if (!(v instanceof Map)) {
            throw err(field, v == null ? "is missing or null" : "must be an object, got "
                + Json.typeName(v), FIX);
        }
        Map<String, Object> m = (Map<String, Object>) v;
        for (String k : m.keySet()) {
            if (!names.contains(k) && !optional.contains(k)) {
                String key = k.length() > 40 ? k.substring(0, 40) : k;
                List<String> known = new ArrayList<String>(names);
                known.addAll(optional);
                throw err(field + "." + key, "unknown field", "use only " + known
                    + " (or update the app if a newer exporter wrote it)");
            }
        }
        for (String k : names) {
            if (!m.containsKey(k)) {
                throw err(field + "." + k, "is missing", FIX);
            }
        }
        return m;
    }

    private static String choice(Map<String, Object> z, String key, String[] names) {
        Object v = z.get(key);
        if (!(v instanceof String) || Recipe.code(names, (String) v) < 0) {
            String got = v == null ? "missing or null" : Json.writeCompact(v);
            got = got.length() > 60 ? got.substring(0, 60) + "..." : got;
            throw err("recipe.zo." + key, "is " + got, "use one of "
                + Arrays.toString(names));
        }
        return (String) v;
    }

    private static long integer(Map<String, Object> z, String key, long lo, long hi) {
        return integer(z, key, "recipe.zo." + key, lo, hi);
    }

    private static long integer(Map<String, Object> z, String key, String field, long lo, long hi) {
        Object v = z.get(key);
        if (!(v instanceof Long)) {
            throw err(field, "must be an integer, got " + Json.typeName(v), "set " + key
                + " to an integer in [" + lo + ", " + hi + "]");
        }
        long x = (Long) v;
        if (x < lo || x > hi) {
            throw err(field, "is " + x + ", outside [" + lo + ", " + hi + "]", "set " + key
                + " within [" + lo + ", " + hi + "]");
        }
        return x;
    }

    private static double real(Map<String, Object> z, String key, double lo, boolean loOpen,
            double hi, boolean hiOpen) {
        return real(z, key, "recipe.zo." + key, lo, loOpen, hi, hiOpen);
    }

    private static double real(Map<String, Object> o, String key, String field, double lo,
            boolean loOpen, double hi, boolean hiOpen) {
        Object v = o.get(key);
        if (!(v instanceof Long || v instanceof Double)) {
            throw err(field, "must be a number, got " + Json.typeName(v), "set it to a finite number");
        }
        double x = ((Number) v).doubleValue();
        boolean bad = Double.isNaN(x) || Double.isInfinite(x) || (loOpen ? x <= lo : x < lo)
            || (hiOpen ? x >= hi : x > hi);
        if (bad) {
            String range = (loOpen ? "(" : "[") + lo + ", " + hi + (hiOpen ? ")" : "]");
            throw err(field, "is " + x + ", outside " + range, "set it within " + range);
        }
        return x;
    }
}
