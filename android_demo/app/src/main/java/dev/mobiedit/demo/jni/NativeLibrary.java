package dev.mobiedit.demo.jni;

import java.io.File;

/**
 * Loads {@code libmobiedit_jni.so} once. On the phone it comes from the APK
 * ({@code System.loadLibrary}); in host JVM tests the system property {@code mobiedit.jni.path}
 * names the absolute path of the host build (android_demo/build/jni-host/libmobiedit_jni.so).
 */
public final class NativeLibrary {
    /** System property holding an absolute path to the library (host tests). */
    public static final String PATH_PROPERTY = "mobiedit.jni.path";
    private static boolean loaded;
    private static Throwable failure;

    private NativeLibrary() {
    }

    /** Load the library if needed; throws UnsatisfiedLinkError with a fix when it is missing. */
    public static synchronized void ensureLoaded() {
        if (loaded) {
            return;
        }
        if (failure != null) {
            throw linkError(failure);
        }
        try {
            String path = System.getProperty(PATH_PROPERTY);
            if (path != null && path.length() > 0) {
                if (!new File(path).isFile()) {
                    throw new UnsatisfiedLinkError(PATH_PROPERTY + "=" + path + " is not a file");
                }
                System.load(path);
            } else {
                System.loadLibrary("mobiedit_jni");
            }
            loaded = true;
        } catch (UnsatisfiedLinkError e) {
            failure = e;
            throw linkError(e);
        }
    }

    /** True if the library is (or can be) loaded; never throws. */
    public static boolean isAvailable() {
        try {
            ensureLoaded();
            return true;
        } catch (UnsatisfiedLinkError e) {
            return false;
        }
    }

    private static UnsatisfiedLinkError linkError(Throwable cause) {
        UnsatisfiedLinkError e = new UnsatisfiedLinkError("libmobiedit_jni.so: cannot load ("
                + cause.getMessage() + ") — fix: on a phone, build the APK with Gradle + NDK "
                + "(the offline CI APK has no native code); in host tests, set -D" + PATH_PROPERTY);
        e.initCause(cause);
        return e;
    }
}
