package dev.mobiedit.demo.core;

import java.security.MessageDigest;

/**
 * The journal's bit-exact tensor identity, equal to mobiedit.journal.tensor_sha256:
 * {@code sha256(f"{dtype}{tuple(shape)}".encode() + raw bytes)}, e.g. the prefix
 * {@code "torch.float32(128, 512)"}. Used for {@code base_sha256} of a module's base weight.
 */
public final class TensorHash {
    private TensorHash() {
    }

    /** tensor_sha256 of {@code t}. */
    public static String of(Tensor t) {
        MessageDigest md = Sha256.digest();
        md.update((torchDtype(t.dtype) + pyTuple(t.shape())).getBytes(Files2.UTF8));
        md.update(t.raw());
        return Sha256.toHex(md.digest());
    }

    /** torch's printed dtype for a safetensors tag ("F32" -> "torch.float32"). */
    public static String torchDtype(String tag) {
        String[][] map = {{"F64", "float64"}, {"F32", "float32"}, {"F16", "float16"},
            {"BF16", "bfloat16"}, {"I64", "int64"}, {"I32", "int32"}, {"I16", "int16"},
            {"I8", "int8"}, {"U8", "uint8"}, {"BOOL", "bool"}};
        for (String[] m : map) {
            if (m[0].equals(tag)) {
                return "torch." + m[1];
            }
        }
        throw new MobiEditError("dtype " + tag + " has no torch name", "tensor hash",
            "store base weights as F32, F16 or BF16");
    }

    /** Python's repr of a tuple of ints: "()", "(3,)", "(2, 3)". */
    public static String pyTuple(long[] shape) {
        StringBuilder sb = new StringBuilder("(");
        for (int i = 0; i < shape.length; i++) {
            if (i > 0) {
                sb.append(", ");
            }
            sb.append(shape[i]);
        }
        if (shape.length == 1) {
            sb.append(',');
        }
        return sb.append(')').toString();
    }
}
