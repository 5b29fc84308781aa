package dev.mobiedit.demo.core;

import java.util.Arrays;

/**
 * A program input or output on the host: float32 or int64 values (row-major) with a shape.
 * The runtime layer converts these to its own tensors; everything above it (the program
 * contract, the edit packing, the tests) works with these. The bundle's programs take and return
 * nothing else (docs/bundle_format.md: even the edit program's mask is int64, since the ExecuTorch
 * Java API cannot build bool tensors).
 */
public final class HostTensor {
    /** Element types of the bundle's programs (docs/bundle_format.md "Program interfaces"). */
    public enum DType { F32, I64 }

    public final DType dtype;
    private final long[] shape;
    private final float[] f;
    private final long[] l;

    private HostTensor(DType dtype, long[] shape, float[] f, long[] l, int length) {
        long n = numel(shape);
        if (n != length) {
            throw new IllegalArgumentException(length + " values for shape "
                + Arrays.toString(shape));
        }
        this.dtype = dtype;
        this.shape = shape.clone();
        this.f = f;
        this.l = l;
    }

    /** float32 tensor over {@code values} (not copied). */
    public static HostTensor f32(float[] values, long... shape) {
        return new HostTensor(DType.F32, shape, values, null, values.length);
    }

    /** int64 tensor over {@code values} (not copied). */
    public static HostTensor i64(long[] values, long... shape) {
        return new HostTensor(DType.I64, shape, null, values, values.length);
    }

    /** Copy of the shape. */
    public long[] shape() {
        return shape.clone();
    }

    /** Element count. */
    public int numel() {
        return (int) numel(shape);
    }

    /** The float32 values (not copied). */
    public float[] floats() {
        need(DType.F32);
        return f;
    }

    /** The int64 values (not copied). */
    public long[] longs() {
        need(DType.I64);
        return l;
    }

    /** e.g. "F32[2, 3]". */
    public String describe() {
        return dtype + Arrays.toString(shape);
    }

    @Override
    public String toString() {
        return "HostTensor(" + describe() + ")";
    }

    private void need(DType want) {
        if (dtype != want) {
            throw new IllegalStateException("tensor is " + describe() + ", not " + want);
        }
    }

    static long numel(long[] shape) {
        long n = 1;
        for (long s : shape) {
            if (s < 0) {
                throw new IllegalArgumentException("negative size in " + Arrays.toString(shape));
            }
            n *= s;
        }
        return n;
    }
}
