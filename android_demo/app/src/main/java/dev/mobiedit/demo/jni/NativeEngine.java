package dev.mobiedit.demo.jni;

/**
 * The native ZO engine (native/, C ABI mobiedit_c.h) through the JNI bridge mobiedit_jni.cpp.
 *
 * <p>Use: {@code configure(cfg, d)}, then {@code step(forward, check)} until the returned status
 * is done (or {@code run}), then {@link #x()} / {@link #history()}. The loop calls
 * {@link Forward#forward} with K rows of deltas and {@link Check#check} with the current delta, on
 * the calling thread. One thread at a time per engine (methods are synchronized). Errors are
 * {@link NativeEngineException}s with the engine's message; {@link #close()} frees the engine.
 */
public final class NativeEngine implements AutoCloseable {

    /** Evaluates K rows of deltas. */
    public interface Forward {
        /**
         * Write the loss of each row of {@code deltas} ([rows, d], row-major) into
         * {@code lossesOut[0..rows)}. Throwing ends the run with status ERROR.
         */
        void forward(float[] deltas, int rows, int d, float[] lossesOut) throws Exception;
    }

    /** The success test of the current delta (early stop). */
    public interface Check {
        /** True if {@code x} ([d]) passes. Throwing ends the run with status ERROR. */
        boolean check(float[] x, int d) throws Exception;
    }

    private long handle;
    private int d = -1;

    /** A new, unconfigured engine. */
    public NativeEngine() {
        NativeLibrary.ensureLoaded();
        handle = nativeCreate();
    }

    /** C ABI version of the loaded library (MOBIEDIT_ABI_VERSION). */
    public static int abiVersion() {
        NativeLibrary.ensureLoaded();
        return nativeAbiVersion();
    }

    /** Validate {@code cfg}, size the engine for deltas of length {@code d}, reset x to 0. */
    public synchronized void configure(EngineConfig cfg, int d) {
        if (cfg == null) {
            throw new NativeEngineException(1, "configure(): cfg is null — fix: pass an EngineConfig",
                null);
        }
        nativeConfigure(open(), cfg.reals(), cfg.ints(), d);
        this.d = d;
    }

    /** Rows per forward batch (K), or -1 before configure. */
    public synchronized int rows() {
        return nativeRows(open());
    }

    /** Start a new run at {@code x0} ([d]; null means zeros). */
    public synchronized void reset(float[] x0) {
        nativeReset(configured(), x0, d);
    }

    /** One loop iteration; returns the status (RUNNING if not done). */
    public synchronized EngineStatus step(Forward forward, Check check) {
        return EngineStatus.of(nativeStep(open(), forward, check));
    }

    /** reset(x0) then step until done. NONFINITE etc. are results, not exceptions. */
    public synchronized EngineStatus run(float[] x0, Forward forward, Check check) {
        return EngineStatus.of(nativeRun(configured(), x0, d, forward, check));
    }

    /** Current status. */
    public synchronized EngineStatus status() {
        return EngineStatus.of(nativeCounts(open())[0]);
    }

    /** Forward calls made in the current run. */
    public synchronized long steps() {
        return nativeCounts(open())[2];
    }

    /** Losses evaluated in the current run (K per forward call). */
    public synchronized long evals() {
        return nativeCounts(open())[3];
    }

    /** Check calls made in the current run. */
    public synchronized long checks() {
        return nativeCounts(open())[4];
    }

    /** Copy of the current delta x [d]. */
    public synchronized float[] x() {
        return nativeX(open());
    }

    /** Copy of the base-loss history (one value per completed estimate). */
    public synchronized double[] history() {
        return nativeHistory(open());
    }

    /** "" or the detail of a NONFINITE / ERROR stop. */
    public synchronized String message() {
        return nativeMessage(open());
    }

    /** Free the native engine; later calls throw (code 3). Idempotent. */
    @Override
    public synchronized void close() {
        if (handle != 0) {
            nativeFree(handle);
            handle = 0;
        }
    }

    /** Static name of a status code ("SUCCESS_CHECK", ...; "UNKNOWN" if out of range). */
    public static String statusName(int status) {
        NativeLibrary.ensureLoaded();
        return nativeStatusName(status);
    }

    /**
     * ROME rank-one factors (docs/zo_spec.md §5): u = v - wk, w = c / (c . k); c null means c = k.
     * Writes uOut [d_out] and wOut [d_in]; throws (code 5) for non-finite or degenerate input.
     */
    public static void rankOne(float[] k, float[] v, float[] wk, float[] c, float[] uOut,
            float[] wOut) {
        NativeLibrary.ensureLoaded();
        nativeRankOne(k, v, wk, c, uOut, wOut);
    }

    /** n directions [n, d] of kind 0 (Rademacher) or 1 (Gaussian), exactly as the engine draws. */
    public static float[] directions(int kind, long seed, int step, int stream, int n, int d) {
        NativeLibrary.ensureLoaded();
        float[] out = new float[n * d];
        nativeDirections(kind, seed, step, stream, n, d, out);
        return out;
    }

    private long open() {
        if (handle == 0) {
            throw new NativeEngineException(3, "engine: already closed — fix: create a new NativeEngine",
                null);
        }
        return handle;
    }

    private long configured() {
        long h = open();
        if (d < 0) {
            throw new NativeEngineException(3, "engine: not configured — fix: call configure() first",
                null);
        }
        return h;
    }

    static native int nativeAbiVersion();

    static native void nativeConfigDefault(double[] reals, long[] ints);

    private static native long nativeCreate();

    private static native void nativeFree(long h);

    private static native void nativeConfigure(long h, double[] reals, long[] ints, int d);

    private static native int nativeRows(long h);

    private static native void nativeReset(long h, float[] x0, int d);

    private static native int nativeStep(long h, Forward forward, Check check);

    private static native int nativeRun(long h, float[] x0, int d, Forward forward, Check check);

    private static native long[] nativeCounts(long h);

    private static native float[] nativeX(long h);

    private static native double[] nativeHistory(long h);

    private static native String nativeMessage(long h);

    private static native String nativeStatusName(int status);

    private static native void nativeRankOne(float[] k, float[] v, float[] wk, float[] c,
            float[] uOut, float[] wOut);

    private static native void nativeDirections(int kind, long seed, int step, int stream, int n,
            int d, float[] out);
}
