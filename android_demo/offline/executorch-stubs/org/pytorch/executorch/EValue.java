package org.pytorch.executorch;

/** COMPILE-ONLY STUB of org.pytorch.executorch.EValue (see Module stub). */
public class EValue {
    private EValue() {
    }

    public static EValue from(Tensor tensor) {
        throw new UnsupportedOperationException("ExecuTorch stub");
    }

    public Tensor toTensor() {
        throw new UnsupportedOperationException("ExecuTorch stub");
    }
}
