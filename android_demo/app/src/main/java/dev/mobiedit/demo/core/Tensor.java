package dev.mobiedit.demo.core;

import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.util.Arrays;

/**
 * One named tensor of a safetensors file: dtype tag ("F32", "F16", "BF16", ...), shape and the raw
 * little-endian bytes. Only F32 is converted to Java values ({@link #floats()}); other dtypes
 * are kept as bytes (enough to hash them, see {@link TensorHash}).
 */
public final class Tensor {
    public final String name;
    public final String dtype;
    private final long[] shape;
    private final byte[] raw;

    /** {@code raw} must hold numel * itemSize(dtype) bytes. */
    public Tensor(String name, String dtype, long[] shape, byte[] raw) {
        long want = numel(shape) * itemSize(dtype);
        if (raw.length != want) {
            throw new IllegalArgumentException("tensor '" + name + "': " + raw.length
                + " bytes for " + dtype + Arrays.toString(shape) + " (expected " + want + ")");
        }
        this.name = name;
        this.dtype = dtype;
        this.shape = shape.clone();
        this.raw = raw;
    }

    /** An F32 tensor holding {@code values} with {@code shape}. */
    public static Tensor f32(String name, long[] shape, float[] values) {
        ByteBuffer b = ByteBuffer.allocate(values.length * 4).order(ByteOrder.LITTLE_ENDIAN);
        b.asFloatBuffer().put(values);
        return new Tensor(name, "F32", shape, b.array());
    }

    /** Copy of the shape. */
    public long[] shape() {
        return shape.clone();
    }

    /** The raw little-endian bytes (not copied: do not modify). */
    public byte[] raw() {
        return raw;
    }

    /** Element count. */
    public long numel() {
        return numel(shape);
    }

    /** Values of an F32 tensor; MobiEditError for another dtype. */
    public float[] floats() {
        if (!"F32".equals(dtype)) {
            throw new MobiEditError("tensor '" + name + "' is " + dtype + ", expected F32",
                "safetensors", "write float32 tensors");
        }
        float[] out = new float[(int) numel()];
        ByteBuffer.wrap(raw).order(ByteOrder.LITTLE_ENDIAN).asFloatBuffer().get(out);
        return out;
    }

    /** Bytes per element of a safetensors dtype tag, or -1 if unknown. */
    public static int itemSize(String dtype) {
        if ("F64".equals(dtype) || "I64".equals(dtype) || "U64".equals(dtype)) {
            return 8;
        }
        if ("F32".equals(dtype) || "I32".equals(dtype) || "U32".equals(dtype)) {
            return 4;
        }
        if ("F16".equals(dtype) || "BF16".equals(dtype) || "I16".equals(dtype)
                || "U16".equals(dtype)) {
            return 2;
        }
        if ("I8".equals(dtype) || "U8".equals(dtype) || "BOOL".equals(dtype)) {
            return 1;
        }
        return -1;
    }

    static long numel(long[] shape) {
        long n = 1;
        for (long s : shape) {
            n *= s;
        }
        return n;
    }
}
