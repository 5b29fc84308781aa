package org.pytorch.executorch;

/** COMPILE-ONLY STUB of org.pytorch.executorch.Tensor (see Module stub). */
public abstract class Tensor {
    public static Tensor fromBlob(float[] data, long[] shape) {
        throw new UnsupportedOperationException("ExecuTorch stub");
    }

    public static Tensor fromBlob(long[] data, long[] shape) {
        throw new UnsupportedOperationException("ExecuTorch stub");
    }

    public long[] shape() {
        throw new UnsupportedOperationException("ExecuTorch stub");
    }

    public float[] getDataAsFloatArray() {
        throw new UnsupportedOperationException("ExecuTorch stub");
    }

    public long[] getDataAsLongArray() {
        throw new UnsupportedOperationException("ExecuTorch stub");
    }
}
