package dev.mobiedit.demo.core;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.Arrays;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import org.junit.jupiter.api.Test;

class JsonTest {
    @Test
    void parsesAllTypes() {
        Map<String, Object> o = Json.parseObject(
            "{\"a\": 1, \"b\": -2.5e3, \"c\": \"x\\u00e9\\n\", \"d\": [true, false, null], \"e\": {}}", "t");
        assertEquals(1L, o.get("a"));
        assertEquals(-2500.0, o.get("b"));
        assertEquals("xé\n", o.get("c"));
        assertEquals(Arrays.asList(true, false, null), o.get("d"));
        assertTrue(((Map<?, ?>) o.get("e")).isEmpty());
    }

    @Test
    void errorsNameTheOffsetAndSource() {
        MobiEditError e = assertThrows(MobiEditError.class, () -> Json.parse("{\"a\": }", "manifest.json"));
        assertTrue(e.getMessage().startsWith("manifest.json: malformed JSON at character 6"), e.getMessage());
        assertThrows(MobiEditError.class, () -> Json.parse("[1, 2] x", "t"));
        assertThrows(MobiEditError.class, () -> Json.parse("{\"a\": 1, \"a\": 2}", "t"));
        assertThrows(MobiEditError.class, () -> Json.parseObject("[1]", "t"));
    }

    @Test
    void writesLikePythonJsonDumpsSortKeys() {
        Map<String, Object> m = new LinkedHashMap<>();
        m.put("z", 1L);
        m.put("a", Arrays.asList("é\"\\", null, true, 0.5));
        m.put("m", new LinkedHashMap<String, Object>());
        // python3 -c 'import json; print(json.dumps({"z":1,"a":["é\"\\",None,True,0.5],"m":{}}, sort_keys=True, ensure_ascii=False))'
        assertEquals("{\"a\": [\"é\\\"\\\\\", null, true, 0.5], \"m\": {}, \"z\": 1}", Json.write(m, true));
    }

    @Test
    void floatsFollowPythonRepr() {
        String[][] cases = {{"0.5", "0.5"}, {"100.0", "100.0"}, {"1e-05", "1.0E-5"}, {"0.0001", "1.0E-4"},
            {"1e+16", "1.0E16"}, {"1234567890123456.0", "1.234567890123456E15"}, {"-0.0", "-0.0"},
            {"0.1", "0.1"}, {"3.14159", "3.14159"}, {"1.5e-07", "1.5E-7"}};
        for (String[] c : cases) {
            assertEquals(c[0], Json.pyFloat(Double.parseDouble(c[1])), c[1]);
        }
        assertThrows(IllegalArgumentException.class, () -> Json.pyFloat(Double.NaN));
    }

    @Test
    void roundTripKeepsIntegersIntegral() {
        Object v = Json.parse(Json.write(Arrays.asList(1L, 2.0, "s"), false), "t");
        List<?> l = (List<?>) v;
        assertEquals(1L, l.get(0));
        assertEquals(2.0, l.get(1));
        assertNull(Json.parse("null", "t"));
    }
}
