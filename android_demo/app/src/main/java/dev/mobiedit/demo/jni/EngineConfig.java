package dev.mobiedit.demo.jni;

import dev.mobiedit.demo.core.Recipe;

/**
 * Every knob of the ZO loop (mirror of {@code mobiedit_config_t}; semantics in
 * docs/zo_spec.md). {@link #defaults()} asks the engine for its defaults;
 * {@link #fromRecipe} gives a bundle's search: its manifest's recipe (the shipped method's
 * settings as export/recipe.py wrote them; {@link Recipe#shippedFallback} for manifests without
 * one). Validation is the engine's: {@link NativeEngine#configure} throws naming the field.
 */
public final class EngineConfig implements Cloneable {
    public static final int EST_PAPER = 0;
    public static final int EST_FZOO = 1;
    public static final int EST_ANTITHETIC = 2;
    public static final int OPT_SGD = 0;
    public static final int OPT_ADAM = 1;
    public static final int LR_CONSTANT = 0;
    public static final int LR_COSINE = 1;
    public static final int DIRECTIONS_IID = 0;
    public static final int DIRECTIONS_COORDINATES = 1;
    public static final int NORMALISE_SPREAD = 0;
    public static final int NORMALISE_GRADIENT = 1;
    public static final int CHECK_AT_UPDATE = 0;
    public static final int CHECK_AT_BASE = 1;

    public int estimator;
    public int nDirs;
    public int optimizer;
    public int lrSchedule;
    public double h;
    public double lr;
    public double lrMin;
    public double momentum;
    public double beta1;
    public double beta2;
    public double adamEps;
    public double maxNorm;
    public double lossTol;
    public double minRelImprove;
    public long maxSteps;
    public long maxEvals;
    public long checkEvery;
    public long patience;
    public long seed;
    public int directions;
    public int normalise;
    public int checkAt;

    /**
     * This search with at most {@code maxSteps} steps and seed {@code seed}, every other field
     * the same (a settle round, app.EditRunner; mobiedit/driver.py settle_value).
     */
    public EngineConfig withBudget(long maxSteps, long seed) {
        EngineConfig c;
        try {
            c = (EngineConfig) clone();  // every field a primitive: a field-for-field copy
        } catch (CloneNotSupportedException e) {
            throw new AssertionError(e);
        }
        c.maxSteps = maxSteps;
        c.seed = seed;
        return c;
    }

    /** The engine's defaults (equal to mobiedit.zo.ZOConfig's); needs the native library. */
    public static EngineConfig defaults() {
        NativeLibrary.ensureLoaded();
        double[] reals = new double[10];
        long[] ints = new long[12];
        NativeEngine.nativeConfigDefault(reals, ints);
        EngineConfig c = new EngineConfig();
        c.h = reals[0];
        c.lr = reals[1];
        c.lrMin = reals[2];
        c.momentum = reals[3];
        c.beta1 = reals[4];
        c.beta2 = reals[5];
        c.adamEps = reals[6];
        c.maxNorm = reals[7];
        c.lossTol = reals[8];
        c.minRelImprove = reals[9];
        c.estimator = (int) ints[0];
        c.nDirs = (int) ints[1];
        c.optimizer = (int) ints[2];
        c.lrSchedule = (int) ints[3];
        c.maxSteps = ints[4];
        c.maxEvals = ints[5];
        c.checkEvery = ints[6];
        c.patience = ints[7];
        c.seed = ints[8];
        c.directions = (int) ints[9];
        c.normalise = (int) ints[10];
        c.checkAt = (int) ints[11];
        return c;
    }

    /**
     * The search of {@code recipe} (manifest "recipe", every ZOConfig field) with ||z|| clamped to
     * {@code maxNorm} (the bundle's edit.objective.clamp_norm_factor * sqrt(d)); needs no native
     * library. The recipe was validated when the manifest was read.
     */
    public static EngineConfig fromRecipe(Recipe recipe, double maxNorm) {
        EngineConfig c = new EngineConfig();
        c.estimator = Recipe.code(Recipe.ESTIMATORS, recipe.estimator);
        c.nDirs = recipe.nDirs;
        c.h = recipe.h;
        c.optimizer = Recipe.code(Recipe.OPTIMIZERS, recipe.optimizer);
        c.lr = recipe.lr;
        c.lrMin = recipe.lrMin;
        c.lrSchedule = Recipe.code(Recipe.SCHEDULES, recipe.lrSchedule);
        c.momentum = recipe.momentum;
        c.beta1 = recipe.beta1;
        c.beta2 = recipe.beta2;
        c.adamEps = recipe.adamEps;
        c.maxNorm = maxNorm;
        c.maxSteps = recipe.maxSteps;
        c.maxEvals = recipe.maxEvals;
        c.checkEvery = recipe.checkEvery;
        c.lossTol = recipe.lossTol;
        c.patience = recipe.patience;
        c.minRelImprove = recipe.minRelImprove;
        c.seed = recipe.seed;
        c.directions = Recipe.code(Recipe.DIRECTIONS, recipe.directions);
        c.normalise = Recipe.code(Recipe.NORMALISE, recipe.normalise);
        c.checkAt = Recipe.code(Recipe.CHECK_AT, recipe.checkAt);
        return c;
    }

    /** Rows per forward batch (K) of this estimator: paper 3n, fzoo n+1, antithetic 2n. */
    public int rows() {
        if (estimator == EST_PAPER) {
            return 3 * nDirs;
        }
        return estimator == EST_FZOO ? nDirs + 1 : 2 * nDirs;
    }

    double[] reals() {
        return new double[] {h, lr, lrMin, momentum, beta1, beta2, adamEps, maxNorm, lossTol,
            minRelImprove};
    }

    long[] ints() {
        return new long[] {estimator, nDirs, optimizer, lrSchedule, maxSteps, maxEvals, checkEvery,
            patience, seed, directions, normalise, checkAt};
    }
}
