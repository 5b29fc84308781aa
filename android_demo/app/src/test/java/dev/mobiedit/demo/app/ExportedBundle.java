package dev.mobiedit.demo.app;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;

import dev.mobiedit.demo.core.Files2;
import dev.mobiedit.demo.core.Fixtures;
import dev.mobiedit.demo.core.HostTensor;
import dev.mobiedit.demo.core.Json;
import dev.mobiedit.demo.core.Manifest;
import dev.mobiedit.demo.core.ManifestReader;
import dev.mobiedit.demo.core.Sha256;
import dev.mobiedit.demo.jni.Jni;
import java.io.File;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Base64;
import java.util.List;
import java.util.Map;

/**
 * The bundle written by the real exporter (fixtures/exported_bundle, made by
 * tools/make_bundle_fixture.py with `mobiedit export`) and what the tests against it share
 * ({@link ExportedBundleTest}, {@link ExportedBundleWriteCheckTest}): its manifest, program_io.json
 * (model.pte's ExecuTorch MethodMeta of every method) and edit_case.json (mobiedit.export's host
 * side on one request); a {@link Recording} program executor; checks that a tensor or a call's
 * inputs are what the fixture / model.pte declare.
 */
final class ExportedBundle {
    /** The bundle folder, its manifest, program_io.json and edit_case.json (after {@link #load}). */
    static File dir;
    static Manifest m;
    static Map<String, Object> io;
    static Map<String, Object> edit;

    private ExportedBundle() {
    }

    /** Read the fixture; the tests against it need the JNI library ({@link Jni#require}). */
    static void load() throws Exception {
        Jni.require();
        dir = Fixtures.exportedBundle();
        m = ManifestReader.open(dir, null);
        io = Json.parseObject(Files2.readText(new File(dir, "program_io.json")), "program_io.json");
        edit = Json.parseObject(Files2.readText(new File(dir, "edit_case.json")), "edit_case.json");
    }

    // ---------------------------------------------------------------- helpers

    @SuppressWarnings("unchecked")
    static Map<String, Object> obj(Map<String, Object> o, String... path) {
        Map<String, Object> cur = o;
        for (String k : path) {
            cur = (Map<String, Object>) cur.get(k);
        }
        return cur;
    }

    @SuppressWarnings("unchecked")
    static List<Map<String, Object>> metas(String method, String kind) {
        return (List<Map<String, Object>>) obj(io, "methods", method).get(kind);
    }

    static long[] shape(Map<String, Object> meta) {
        return ((List<?>) meta.get("shape")).stream().mapToLong(x -> (Long) x).toArray();
    }

    static String dtype(HostTensor t) {
        return t.dtype == HostTensor.DType.F32 ? "float32" : "int64";
    }

    /** Raw little-endian bytes, as the fixture hashes them. */
    static byte[] raw(HostTensor t) {
        ByteBuffer b = ByteBuffer.allocate(t.numel() * (t.dtype == HostTensor.DType.I64 ? 8 : 4))
            .order(ByteOrder.LITTLE_ENDIAN);
        if (t.dtype == HostTensor.DType.F32) {
            b.asFloatBuffer().put(t.floats());
        } else {
            b.asLongBuffer().put(t.longs());
        }
        return b.array();
    }

    static float[] f32(Map<String, Object> spec) {
        float[] out = new float[(int) Arrays.stream(shape(spec)).reduce(1, (a, c) -> a * c)];
        ByteBuffer.wrap(Base64.getDecoder().decode((String) spec.get("b64"))).order(ByteOrder.LITTLE_ENDIAN)
            .asFloatBuffer().get(out);
        return out;
    }

    static void assertMatches(String what, Map<String, Object> spec, HostTensor t) {
        assertEquals(spec.get("dtype"), dtype(t), what);
        assertArrayEquals(shape(spec), t.shape(), what);
        if (spec.containsKey("b64") && t.dtype == HostTensor.DType.I64) {
            long[] want = new long[t.numel()];
            ByteBuffer.wrap(Base64.getDecoder().decode((String) spec.get("b64"))).order(ByteOrder.LITTLE_ENDIAN)
                .asLongBuffer().get(want);
            assertArrayEquals(want, t.longs(), what);
        } else if (spec.containsKey("b64") && t.dtype == HostTensor.DType.F32) {
            assertArrayEquals(f32(spec), t.floats(), what);
        }
        assertEquals(spec.get("sha256"), Sha256.hex(raw(t)), what + " (sha256 of its bytes)");
    }

    /** One recorded program call. */
    static final class Call {
        final Manifest.Program program;
        final HostTensor[] inputs;

        Call(Manifest.Program program, HostTensor[] inputs) {
            this.program = program;
            this.inputs = inputs;
        }
    }

    /**
     * Records every call and answers with zero float32 outputs of the shapes model.pte declares,
     * except: logits put token 7 first; new_kv holds 1000 * call + position; the prefix program
     * returns the exporter's keys / values of edit_case.json; the edit program's losses are
     * 0..K-1 and its correct[k, b] = 100 k + b (integer counts, as the real program's).
     */
    static final class Recording implements ProgramExecutor {
        final List<Call> calls = new ArrayList<>();

        @Override
        public HostTensor[] execute(Manifest.Program p, HostTensor[] inputs) {
            HostTensor[] copy = new HostTensor[inputs.length];
            for (int i = 0; i < copy.length; i++) {
                HostTensor t = inputs[i];
                copy[i] = t.dtype == HostTensor.DType.F32 ? HostTensor.f32(t.floats().clone(), t.shape())
                    : HostTensor.i64(t.longs().clone(), t.shape());
            }
            calls.add(new Call(p, copy));
            List<Map<String, Object>> outs = metas(p.method, "outputs");
            HostTensor[] res = new HostTensor[outs.size()];
            for (int i = 0; i < res.length; i++) {
                long[] s = shape(outs.get(i));
                float[] v = new float[(int) Arrays.stream(s).reduce(1, (a, c) -> a * c)];
                String name = p.outputs.get(i);
                if (name.equals("logits")) {
                    v[7] = 1f;
                } else if (name.equals("new_kv")) {
                    for (int j = 0; j < v.length; j++) {
                        v[j] = 1000 * calls.size() + (j / (int) s[3]) % (int) s[2];
                    }
                } else if (name.equals("keys") || name.equals("values")) {
                    v = f32(obj(edit, "prefix_outputs", name));
                } else if (name.equals("losses")) {
                    for (int j = 0; j < v.length; j++) {
                        v[j] = j;
                    }
                } else if (name.equals("correct")) {
                    for (int j = 0; j < v.length; j++) {
                        v[j] = 100 * (j / (int) s[1]) + j % (int) s[1];
                    }
                }
                res[i] = HostTensor.f32(v, s);
            }
            return res;
        }

        @Override
        public void close() {
        }
    }

    /** Every input of {@code c} has the dtype and shape that model.pte's method declares. */
    static void assertCallMatchesThePte(Call c) {
        List<Map<String, Object>> want = metas(c.program.method, "inputs");
        assertEquals(want.size(), c.inputs.length, c.program.method + ": number of inputs");
        for (int i = 0; i < want.size(); i++) {
            String what = c.program.method + " input " + i + " '" + c.program.inputs.get(i) + "'";
            assertEquals(want.get(i).get("dtype"), dtype(c.inputs[i]), what);
            assertArrayEquals(shape(want.get(i)), c.inputs[i].shape(), what);
        }
    }

    static HostTensor input(Call c, String name) {
        return c.inputs[c.program.inputs.indexOf(name)];
    }
}
