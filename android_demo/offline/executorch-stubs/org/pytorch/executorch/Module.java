package org.pytorch.executorch;

/**
 * COMPILE-ONLY STUB of org.pytorch.executorch.Module (executorch-android 1.0.x), used by
 * android_demo/ci.sh to compile the app offline. It is never packaged: the offline APK has no
 * ExecuTorch, so the app reports that the runtime is missing. The Gradle build uses the real AAR.
 */
public class Module {
    private Module() {
    }

    public static Module load(String modelPath) {
        throw new UnsupportedOperationException("ExecuTorch stub");
    }

    public EValue[] forward(EValue... inputs) {
        throw new UnsupportedOperationException("ExecuTorch stub");
    }

    public EValue[] execute(String methodName, EValue... inputs) {
        throw new UnsupportedOperationException("ExecuTorch stub");
    }

    public int loadMethod(String methodName) {
        throw new UnsupportedOperationException("ExecuTorch stub");
    }

    public String[] getMethods() {
        throw new UnsupportedOperationException("ExecuTorch stub");
    }

    public void destroy() {
    }
}
