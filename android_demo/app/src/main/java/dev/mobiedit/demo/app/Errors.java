package dev.mobiedit.demo.app;

import dev.mobiedit.demo.core.MobiEditError;
import dev.mobiedit.demo.jni.NativeEngineException;

/** One user-facing line for any failure of a background job. */
public final class Errors {
    private Errors() {
    }

    /** The message to show for {@code t} (always names a fix for the known kinds). */
    public static String describe(Throwable t) {
        if (t instanceof MobiEditError) {
            return t.getMessage();
        }
        if (t instanceof NativeEngineException) {
            Throwable c = t.getCause();
            return "edit engine: " + t.getMessage() + (c == null ? "" : " (caused by "
                + describe(c) + ")");
        }
        if (t instanceof UnsatisfiedLinkError || t instanceof NoClassDefFoundError) {
            return "this APK has no native engine or ExecuTorch runtime (" + t.getMessage()
                + ") — fix: build and install the app with Gradle + NDK as android_demo/README.md says"
                + " (the offline CI APK is for checking the Java part only)";
        }
        if (t instanceof OutOfMemoryError) {
            return "out of memory — fix: use a smaller or quantized bundle";
        }
        String m = t.getMessage();
        return t.getClass().getSimpleName() + (m == null ? "" : ": " + m);
    }
}
