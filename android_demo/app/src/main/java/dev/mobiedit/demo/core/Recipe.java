package dev.mobiedit.demo.core;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collections;
import java.util.List;

/**
 * How this bundle's edits are searched and judged: the manifest's {@code recipe}
 * (docs/bundle_format.md; written by export/recipe.py from the shipped method,
 * {@code mobiedit.methods.mobiedit.MobiEditConfig()}). {@code zo}: every field of
 * {@code mobiedit.zo.ZOConfig} but {@code max_norm} (the app clamps ||z|| to
 * edit.objective.clamp_norm_factor * sqrt(d)); {@code success}: the success rule's thresholds;
 * {@code ladder} (optional): the clamp ladder, {@link #ladder} fractions of
 * edit.objective.clamp_norm_factor tried smallest first by an edit that leaves at least
 * {@link #ladderFromEdits} edits on the bundle ({@code app.Ladder}, mobiedit/ladder.py); absent
 * (bundles exported before it was written), {@link #DEFAULT_LADDER} from
 * {@link #DEFAULT_LADDER_FROM_EDITS} edits on. {@code success.stop_on} (optional): what stops the
 * search, {@link #stopOn} ({@link #STOP_ON}; absent: {@link #STOP_LOOP}). Read and validated by
 * {@link RecipeReader} (as Python's ZOConfig / export/recipe.py validate); turned into the
 * engine's settings by {@code jni.EngineConfig.fromRecipe} and into the success check by
 * {@code app.SuccessCriterion.of}. Immutable.
 */
public final class Recipe {
    /** Names the manifest uses; the index is the engine's code (mobiedit_config_t). */
    public static final String[] ESTIMATORS = {"paper", "fzoo", "antithetic"};
    public static final String[] OPTIMIZERS = {"sgd", "adam"};
    public static final String[] SCHEDULES = {"constant", "cosine"};
    /**
     * {@code zo.directions}: the estimator's own i.i.d. kind, or coordinate directions
     * (mobiedit/zo/rng.py); optional in the manifest, absent = {@code "iid"}.
     */
    public static final String[] DIRECTIONS = {"iid", "coordinates"};
    /**
     * {@code zo.normalise}: how FZOO sizes a step, from the step's own loss spread (FZOO's rule)
     * or from the whole gradient's norm ({@code "gradient"}: estimator {@code "fzoo"} on
     * {@code "coordinates"} directions only); optional in the manifest, absent = {@code "spread"}.
     */
    public static final String[] NORMALISE = {"spread", "gradient"};
    /**
     * {@code zo.check_at}: the loop's check after the update, on the new delta, or from the second
     * step on, on the point the step's program call just evaluated (FZOO's row 0, read from that
     * call: no program call of its own; docs/zo_spec.md §4); optional, absent = {@code "update"}.
     */
    public static final String[] CHECK_AT = {"update", "base"};
    /** The shipped success rule, used only for manifests without a recipe. */
    public static final double FALLBACK_SUCCESS_FRACTION = 0.75;
    public static final double FALLBACK_SUCCESS_NLL = 0.5;
    /**
     * The clamp ladder of a recipe without {@code ladder} (and of the shipped fallback):
     * mobiedit/ladder.py SEQUENTIAL_LADDER, fractions of edit.objective.clamp_norm_factor.
     */
    public static final List<Double> DEFAULT_LADDER =
        Collections.unmodifiableList(Arrays.asList(0.5, 0.75, 1.0));
    /** From how many edits on the bundle (its own included) an edit climbs by default. */
    public static final long DEFAULT_LADDER_FROM_EDITS = 2;
    /** A ladder's rungs at most (export/recipe.py MAX_RUNGS: each rung is a whole search). */
    public static final int MAX_RUNGS = 8;
    /** {@code success.stop_on}: the search stops where the loop's success rule passes. */
    public static final String STOP_LOOP = "loop";
    /**
     * {@code success.stop_on}: where the loop's rule passes, the edit written from that delta
     * must hold too (verify after write), else the search goes on (export/recipe.py).
     */
    public static final String STOP_WRITTEN = "written";
    /** The values of {@code success.stop_on}, as export/recipe.py STOP_ON. */
    public static final List<String> STOP_ON =
        Collections.unmodifiableList(Arrays.asList(STOP_LOOP, STOP_WRITTEN));

    public final String estimator;
    public final int nDirs;
    public final double h;
    public final String optimizer;
    public final double lr;
    public final double lrMin;
    public final String lrSchedule;
    public final double momentum;
    public final double beta1;
    public final double beta2;
    public final double adamEps;
    public final long maxSteps;
    public final long maxEvals;
    public final long checkEvery;
    public final double lossTol;
    public final long patience;
    public final double minRelImprove;
    public final long seed;
    /** How directions are drawn ({@code zo.directions}, one of {@link #DIRECTIONS}). */
    public final String directions;
    /** How FZOO sizes a step ({@code zo.normalise}, one of {@link #NORMALISE}). */
    public final String normalise;
    /** When the loop's check runs ({@code zo.check_at}, one of {@link #CHECK_AT}). */
    public final String checkAt;
    /** Minimum share of fully correct rewrite rows ({@code success.fraction}). */
    public final double successFraction;
    /** Maximum loss minus its decay term ({@code success.nll}). */
    public final double successNll;
    /**
     * What stops the search ({@code success.stop_on}): {@link #STOP_LOOP} (the loop's success
     * rule at the searched delta; recipes without the field, exported before it was written) or
     * {@link #STOP_WRITTEN} (also the written edit's verdict there, {@code app.EditRunner}).
     */
    public final String stopOn;
    /** False: the manifest had no recipe, this is {@link #shippedFallback}. */
    public final boolean fromManifest;
    /**
     * The clamp ladder ({@code ladder.fractions}): 1 to {@link #MAX_RUNGS} finite positive
     * fractions of edit.objective.clamp_norm_factor, strictly increasing; unmodifiable.
     */
    public final List<Double> ladder;
    /** From how many edits on the bundle, its own included, an edit climbs (&gt;= 1). */
    public final long ladderFromEdits;
    /** The search's settle phase after its first success ({@code settle}; {@link Settle#OFF} if absent). */
    public final Settle settle;

    /**
     * The manifest's {@code settle} (mobiedit/recipes.py {@code Settle}, mobiedit/driver.py
     * {@code settle_value}): after the search's first success, up to {@link #rounds} times the kept
     * delta is shrunk by {@link #shrink} and searched again for at most {@link #steps} steps under
     * the same rule and stop (seed + round); a round's delta is kept only if it passes and is
     * shorter, and the first round that is not ends the phase ({@code app.EditRunner}). Immutable.
     */
    public static final class Settle {
        /** No settle phase (bundles exported before the field was written, and the default). */
        public static final Settle OFF = new Settle(0, 0.8, 20);
        /** Rounds at most, in [0, 100]; 0: off. */
        public final int rounds;
        /** Factor of the kept delta each round starts from, in (0, 1). */
        public final double shrink;
        /** Steps a round runs at most, in [1, 10000] when rounds &gt; 0. */
        public final long steps;

        Settle(int rounds, double shrink, long steps) {
            this.rounds = rounds;
            this.shrink = shrink;
            this.steps = steps;
        }

        @Override
        public String toString() {
            return rounds == 0 ? "off" : rounds + " rounds x" + shrink + " <= " + steps + " steps";
        }
    }

    Recipe(String estimator, int nDirs, double h, String optimizer, double lr, double lrMin,
            String lrSchedule, double momentum, double beta1, double beta2, double adamEps,
            long maxSteps, long maxEvals, long checkEvery, double lossTol, long patience,
            double minRelImprove, long seed, double successFraction, double successNll,
            boolean fromManifest, List<Double> ladder, long ladderFromEdits, String stopOn,
            String directions, String normalise, String checkAt, Settle settle) {
        this.estimator = estimator;
        this.nDirs = nDirs;
        this.h = h;
        this.optimizer = optimizer;
        this.lr = lr;
        this.lrMin = lrMin;
        this.lrSchedule = lrSchedule;
        this.momentum = momentum;
        this.beta1 = beta1;
        this.beta2 = beta2;
        this.adamEps = adamEps;
        this.maxSteps = maxSteps;
        this.maxEvals = maxEvals;
        this.checkEvery = checkEvery;
        this.lossTol = lossTol;
        this.patience = patience;
        this.minRelImprove = minRelImprove;
        this.seed = seed;
        this.successFraction = successFraction;
        this.successNll = successNll;
        this.fromManifest = fromManifest;
        this.ladder = Collections.unmodifiableList(new ArrayList<Double>(ladder));
        this.ladderFromEdits = ladderFromEdits;
        this.stopOn = stopOn;
        this.directions = directions;
        this.normalise = normalise;
        this.checkAt = checkAt;
        this.settle = settle;
    }

    /**
     * The shipped recipe, hard-coded here ONLY for manifests without {@code recipe} (bundles
     * exported before the exporter wrote it; same format_version 1): MobiEditConfig()'s FZOO
     * search with {@code edit_K - 1} directions (one program call per step), h 0.05, Adam lr 0.5,
     * at most 150 steps / 3000 loss evaluations, a check every step on the step's own row 0
     * (check_at "base", as shipped_recipe), ZOConfig's defaults for the
     * rest; success fraction 0.75, nll 0.5, stopped where the written edit holds
     * ({@link #STOP_WRITTEN}, as export/recipe.py shipped_recipe); the default clamp ladder. A
     * manifest's recipe always wins.
     */
    public static Recipe shippedFallback(int editK) {
        return new Recipe("fzoo", Math.max(1, editK - 1), 0.05, "adam", 0.5, 0.0, "constant", 0.0,
            0.9, 0.999, 1e-8, 150, 3000, 1, 0.0, 0, 0.0, 0, FALLBACK_SUCCESS_FRACTION,
            FALLBACK_SUCCESS_NLL, false, DEFAULT_LADDER, DEFAULT_LADDER_FROM_EDITS, STOP_WRITTEN,
            "iid", "spread", "base", Settle.OFF);
    }

    /** Rows per step K of {@code estimator} with {@code nDirs} directions. */
    public static long rows(String estimator, long nDirs) {
        if ("paper".equals(estimator)) {
            return 3 * nDirs;
        }
        return "fzoo".equals(estimator) ? nDirs + 1 : 2 * nDirs;
    }

    /** Rows per forward batch (K) of this recipe: paper 3n, fzoo n+1, antithetic 2n. */
    public int rows() {
        return (int) rows(estimator, nDirs);
    }

    /** The engine code of a name ({@link #ESTIMATORS}, {@link #OPTIMIZERS}, {@link #SCHEDULES}). */
    public static int code(String[] names, String name) {
        for (int i = 0; i < names.length; i++) {
            if (names[i].equals(name)) {
                return i;
            }
        }
        return -1;
    }

    @Override
    public String toString() {
        return (fromManifest ? "manifest" : "shipped fallback") + " recipe: " + estimator + " n_dirs="
            + nDirs + " h=" + h + " " + optimizer + " lr=" + lr + " max_steps=" + maxSteps
            + " max_evals=" + maxEvals + " seed=" + seed + " directions=" + directions
            + " normalise=" + normalise + " check_at=" + checkAt
            + ", success_fraction=" + successFraction
            + ", success_nll=" + successNll + ", stop_on=" + stopOn + ", ladder=" + ladder + " from "
            + ladderFromEdits + " edits, settle " + settle;
    }
}
