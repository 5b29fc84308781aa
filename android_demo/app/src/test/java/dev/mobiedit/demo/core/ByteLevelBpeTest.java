package dev.mobiedit.demo.core;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.List;
import java.util.Map;
import org.junit.jupiter.api.Test;

/** Against tokenizer_cases.json, made by the `tokenizers` library (tools/make_tokenizer_fixture.py). */
class ByteLevelBpeTest {
    static int[] ints(Object list) {
        List<?> l = (List<?>) list;
        int[] out = new int[l.size()];
        for (int i = 0; i < out.length; i++) {
            out[i] = ((Long) l.get(i)).intValue();
        }
        return out;
    }

    @Test
    @SuppressWarnings("unchecked")
    void matchesTheTokenizersLibrary() throws Exception {
        ByteLevelBpe tok = Fixtures.tokenizer();
        List<Object> cases = (List<Object>) Json.parse(
            Files2.readText(Fixtures.resource("tokenizer_cases.json")), "cases");
        assertTrue(cases.size() >= 10);
        for (Object o : cases) {
            Map<String, Object> c = (Map<String, Object>) o;
            String text = (String) c.get("text");
            assertArrayEquals(ints(c.get("ids")), tok.encode(text, true), "encode " + text);
            assertArrayEquals(ints(c.get("ids_no_special")), tok.encode(text, false), "plain " + text);
            assertEquals(c.get("decoded"), tok.decode(ints(c.get("ids")), true), "decode " + text);
        }
    }

    @Test
    void specialTokensAndSizes() throws Exception {
        ByteLevelBpe tok = Fixtures.tokenizer();
        assertEquals(1, tok.tokenId("<s>"));
        assertEquals(2, tok.tokenId("</s>"));
        assertEquals(-1, tok.tokenId("no such token"));
        assertEquals(400, tok.size());
        assertEquals("<s>hi", tok.decode(tok.encode("hi", true), false));
    }

    @Test
    void refusesOtherTokenizerKinds() {
        String wp = "{\"model\": {\"type\": \"WordPiece\", \"vocab\": {}}, \"pre_tokenizer\": null}";
        MobiEditError e = assertThrows(MobiEditError.class, () -> ByteLevelBpe.fromJson(wp, "tokenizer.json"));
        assertTrue(e.getMessage().contains("not BPE"), e.getMessage());
        String meta = "{\"model\": {\"type\": \"BPE\", \"vocab\": {}, \"merges\": []}, \"normalizer\": null,"
            + " \"pre_tokenizer\": {\"type\": \"Metaspace\"}}";
        assertTrue(assertThrows(MobiEditError.class, () -> ByteLevelBpe.fromJson(meta, "t")).getMessage()
            .contains("not ByteLevel"));
    }
}
