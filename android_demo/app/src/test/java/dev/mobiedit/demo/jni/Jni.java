package dev.mobiedit.demo.jni;

import org.junit.jupiter.api.Assertions;
import org.junit.jupiter.api.Assumptions;

/**
 * Test guard for the host-built libmobiedit_jni.so. ci.sh sets -Dmobiedit.requireJni=true, so a
 * missing library fails the run there; elsewhere (e.g. Gradle unit tests) those tests are skipped.
 */
public final class Jni {
    private Jni() {
    }

    public static void require() {
        if (NativeLibrary.isAvailable()) {
            return;
        }
        String why = "libmobiedit_jni.so not loadable (-D" + NativeLibrary.PATH_PROPERTY + "="
            + System.getProperty(NativeLibrary.PATH_PROPERTY) + ")";
        if (Boolean.getBoolean("mobiedit.requireJni")) {
            Assertions.fail(why);
        }
        Assumptions.abort(why);
    }
}
