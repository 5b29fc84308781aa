package dev.mobiedit.demo.core;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.Arrays;
import java.util.Collections;
import org.junit.jupiter.api.Test;

class SafetensorsTest {
    @Test
    void writesTheSameBytesAsPythonSafetensors() {
        // safetensors.torch.save({"u": [1., 2.], "w": [3., 4., 5.]}, metadata={"edit_id": "1"})
        byte[] b = Safetensors.write(Arrays.asList(Tensor.f32("u", new long[] {2}, new float[] {1, 2}),
            Tensor.f32("w", new long[] {3}, new float[] {3, 4, 5})), Collections.singletonMap("edit_id", "1"));
        assertEquals(172, b.length);
        assertEquals("7471fa23d8f3e8ec9d1e6b4d3e73707f08ad95847a9e4464f6e952d9f94449fb", Sha256.hex(b));
    }

    @Test
    void roundTrip() {
        float[] v = {0.25f, -1.5f, 3e-8f, Float.MAX_VALUE};
        byte[] b = Safetensors.write(Arrays.asList(Tensor.f32("x", new long[] {2, 2}, v)), null);
        Safetensors.Contents c = Safetensors.parse(b, "t");
        assertArrayEquals(v, c.get("x", "t").floats());
        assertArrayEquals(new long[] {2, 2}, c.get("x", "t").shape());
        assertTrue(c.metadata.isEmpty());
        MobiEditError e = assertThrows(MobiEditError.class, () -> c.get("y", "f.safetensors"));
        assertTrue(e.getMessage().startsWith("f.safetensors: has no tensor 'y'"), e.getMessage());
    }

    @Test
    void refusesDamagedFiles() {
        byte[] good = Safetensors.write(Arrays.asList(Tensor.f32("x", new long[] {3}, new float[] {1, 2, 3})), null);
        assertThrows(MobiEditError.class, () -> Safetensors.parse(new byte[] {1, 2}, "t"));
        byte[] truncated = Arrays.copyOf(good, good.length - 4);
        assertTrue(assertThrows(MobiEditError.class, () -> Safetensors.parse(truncated, "t")).getMessage()
            .contains("data_offsets"));
        byte[] hugeHeader = good.clone();
        hugeHeader[0] = (byte) 0xff;
        hugeHeader[3] = 0x7f;
        assertTrue(assertThrows(MobiEditError.class, () -> Safetensors.parse(hugeHeader, "t")).getMessage()
            .contains("header length"));
    }

    @Test
    void tensorHashEqualsPythonTensorSha256() {
        // mobiedit.journal.tensor_sha256(torch.tensor([[1., 2., 3.], [4., 5., 6.]]))
        Tensor t = Tensor.f32("w", new long[] {2, 3}, new float[] {1, 2, 3, 4, 5, 6});
        assertEquals("6021447e73b1535661a77668d3cd4641d198de0f14c1181c8996bae8a395163d", TensorHash.of(t));
        Tensor v = Tensor.f32("v", new long[] {2}, new float[] {0.5f, -1f});
        assertEquals("279a17f2bb28a648992200ae25a37ea3feff0fb3ed8ced069e9bb4e4abaa69ad", TensorHash.of(v));
        assertEquals("()", TensorHash.pyTuple(new long[0]));
        assertEquals("(3,)", TensorHash.pyTuple(new long[] {3}));
        assertEquals("torch.bfloat16", TensorHash.torchDtype("BF16"));
    }
}
