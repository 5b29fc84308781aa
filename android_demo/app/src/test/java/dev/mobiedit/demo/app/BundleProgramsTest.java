package dev.mobiedit.demo.app;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.mobiedit.demo.core.Fixtures;
import dev.mobiedit.demo.core.HostTensor;
import dev.mobiedit.demo.core.Json;
import dev.mobiedit.demo.core.Manifest;
import dev.mobiedit.demo.core.ManifestReader;
import dev.mobiedit.demo.core.MobiEditError;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collections;
import java.util.List;
import java.util.Map;
import org.junit.jupiter.api.Test;

/** The program contract: names from the manifest decide the order; unknown names are refused. */
class BundleProgramsTest {
    @SuppressWarnings("unchecked")
    static Map<String, Object> program(Map<String, Object> m, String role) {
        return (Map<String, Object>) ((Map<String, Object>) m.get("programs")).get(role);
    }

    static Manifest parse(Map<String, Object> m) {
        @SuppressWarnings("unchecked")
        Map<String, Object> files = (Map<String, Object>) m.get("files");
        files.put("model.pte", Fixtures.map("sha256", String.join("", Collections.nCopies(64, "0")), "bytes", 1L));
        return ManifestReader.parse(Json.write(m, true));
    }

    static String refusal(Map<String, Object> m) {
        Manifest man = parse(m);
        return assertThrows(MobiEditError.class, () -> BundlePrograms.checkContract(man)).getMessage();
    }

    @Test
    void inputsGoInTheManifestsOrderAndOutputsAreReadByName() throws Exception {
        Map<String, Object> map = Fixtures.manifestMap();
        List<Object> in = new ArrayList<>((List<?>) program(map, "decode").get("inputs"));
        Collections.reverse(in);
        program(map, "decode").put("inputs", in);
        program(map, "decode").put("outputs", Arrays.asList("new_kv", "logits"));
        Manifest m = parse(map);
        List<String> seen = new ArrayList<>();
        ProgramExecutor exec = new ProgramExecutor() {
            @Override
            public HostTensor[] execute(Manifest.Program p, HostTensor[] inputs) {
                seen.add(p.method + " " + inputs[0].describe());
                int c = p.method.equals("decode") ? 1 : m.shapes.prefillChunk;
                float[] logits = new float[m.dims.vocabSize];
                logits[p.method.equals("decode") ? 9 : 5] = 1;
                HostTensor kv = HostTensor.f32(new float[2 * 2 * 2 * c * 4], 4, 2, c, 4);
                HostTensor lg = HostTensor.f32(logits, 1, m.dims.vocabSize);
                return p.outputs.get(0).equals("logits") ? new HostTensor[] {lg, kv} : new HostTensor[] {kv, lg};
            }

            @Override
            public void close() {
            }
        };
        BundlePrograms rt = new BundlePrograms(m, exec);
        assertEquals(5, argmax(rt.chat().start(new int[] {1, 2, 3})));
        dev.mobiedit.demo.core.LanguageModel lm = rt.chat();
        lm.start(new int[] {1});
        assertEquals(9, argmax(lm.next(5)));
        assertEquals("prefill I64[1, 8]", seen.get(0));
        assertEquals("decode F32[2, 12]", seen.get(2), "slot_w first: the manifest's order");
    }

    static int argmax(float[] a) {
        int best = 0;
        for (int i = 1; i < a.length; i++) {
            if (a[i] > a[best]) {
                best = i;
            }
        }
        return best;
    }

    @Test
    void refusesProgramsThisAppCannotFeedOrRead() {
        Map<String, Object> m = Fixtures.manifestMap();
        List<Object> in = new ArrayList<>((List<?>) program(m, "edit").get("inputs"));
        in.add("temperature");
        program(m, "edit").put("inputs", in);
        String e = refusal(m);
        assertTrue(e.contains("field 'programs.edit.inputs'") && e.contains("'temperature'"), e);

        // an edit program of the earlier interface (bool mask, KL read-outs named "kl_index")
        m = Fixtures.manifestMap();
        List<Object> old = new ArrayList<>((List<?>) program(m, "edit").get("inputs"));
        old.set(old.indexOf("kl_suffix_index"), "kl_index");
        program(m, "edit").put("inputs", old);
        e = refusal(m);
        assertTrue(e.contains("field 'programs.edit.inputs'") && e.contains("'kl_index'"), e);

        m = Fixtures.manifestMap();
        program(m, "prefill").put("inputs", Arrays.asList("tokens", "start", "kv_cache", "slot_u", "slot_w"));
        e = refusal(m);
        assertTrue(e.contains("does not take 'logit_index'"), e);

        m = Fixtures.manifestMap();
        program(m, "prefix").put("outputs", Arrays.asList("h_suffix", "prefix_kv", "cos", "sin", "kl_ref", "keys"));
        e = refusal(m);
        assertTrue(e.contains("no output 'values'"), e);

        // a family without rotary tables: neither side has cos / sin — fine; one side only — refused
        m = Fixtures.manifestMap();
        program(m, "prefix").put("outputs", Arrays.asList("h_suffix", "prefix_kv", "kl_ref", "keys", "values"));
        e = refusal(m);
        assertTrue(e.contains("cos / sin"), e);
        List<Object> noRope = new ArrayList<>((List<?>) program(m, "edit").get("inputs"));
        noRope.removeAll(Arrays.asList("cos", "sin"));
        program(m, "edit").put("inputs", noRope);
        BundlePrograms.checkContract(parse(m));
    }

    @Test
    void orderNamesAMissingInput() {
        Manifest m = parse(Fixtures.manifestMap());
        MobiEditError e = assertThrows(MobiEditError.class, () -> BundlePrograms.order(m.program("decode"),
            Collections.singletonMap("tokens", HostTensor.i64(new long[] {1}, 1, 1))));
        assertTrue(e.getMessage().contains("no value for input 'start'"), e.getMessage());
        assertArrayEquals(new long[] {1, 1},
            BundlePrograms.order(m.program("decode"), Fixtures.mapOf(m.program("decode").inputs))[0].shape());
    }
}
