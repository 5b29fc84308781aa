package dev.mobiedit.demo.jni;

/** Why a run stopped (docs/zo_spec.md §4); codes equal the C ABI's {@code mobiedit_status}. */
public enum EngineStatus {
    RUNNING, SUCCESS_LOSS, SUCCESS_CHECK, PLATEAU, BUDGET, MAX_STEPS, NONFINITE, ERROR;

    /** The status with C code {@code code}; IllegalArgumentException for an unknown code. */
    public static EngineStatus of(long code) {
        EngineStatus[] all = values();
        if (code < 0 || code >= all.length) {
            throw new IllegalArgumentException("engine status code " + code + " is unknown");
        }
        return all[(int) code];
    }

    /** True for the two early-stop successes (loss below loss_tol, or the check passed). */
    public boolean isSuccess() {
        return this == SUCCESS_LOSS || this == SUCCESS_CHECK;
    }

    /** True once the run has stopped. */
    public boolean isDone() {
        return this != RUNNING;
    }
}
