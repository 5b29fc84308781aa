package dev.mobiedit.demo.jni;

/**
 * A failing call into the native engine. {@link #code()} is the engine's {@code mobiedit_code}
 * (1 invalid argument, 2 config, 3 state, 4 callback, 5 numerical, 6 internal); the message is the
 * engine's one-line text naming the field and the fix. For code 4 the cause is the Java exception
 * that a callback threw.
 */
public final class NativeEngineException extends RuntimeException {
    private static final long serialVersionUID = 1L;
    private final int code;

    /** Called from JNI (mobiedit_jni.cpp) and from Java checks. */
    public NativeEngineException(int code, String message, Throwable cause) {
        super(message, cause);
        this.code = code;
    }

    /** The engine's error code (see class comment). */
    public int code() {
        return code;
    }
}
