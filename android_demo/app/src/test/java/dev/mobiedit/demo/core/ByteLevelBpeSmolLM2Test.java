package dev.mobiedit.demo.core;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Map;
import org.junit.jupiter.api.Test;

/**
 * The app's tokenizer on SmolLM2-135M-Instruct's tokenizer.json (49,152 tokens, 48,900 merges)
 * equals the {@code tokenizers} library on >= 1,000 strings, most of them non-ASCII
 * (fixtures/smollm2/tokenizer_cases.json, made by tools/make_smollm2_tokenizer_fixture.py).
 */
class ByteLevelBpeSmolLM2Test {
    @SuppressWarnings("unchecked")
    private static List<Map<String, Object>> cases() throws Exception {
        Map<String, Object> root = Json.parseObject(SmolLM2Fixtures.text("tokenizer_cases.json"), "cases");
        return (List<Map<String, Object>>) (List<?>) root.get("cases");
    }

    private static String show(String s) {
        StringBuilder b = new StringBuilder();
        for (int i = 0; i < s.length(); ) {
            int cp = s.codePointAt(i);
            b.append(cp < 0x20 || cp > 0x7e ? String.format("\\u{%x}", cp) : String.valueOf((char) cp));
            i += Character.charCount(cp);
        }
        return b.toString();
    }

    @Test
    void encodesAndDecodesLikeTheTokenizersLibraryOnOver1000Strings() throws Exception {
        ByteLevelBpe tok = SmolLM2Fixtures.tokenizer();
        List<Map<String, Object>> cases = cases();
        int nonAscii = 0;
        List<String> failures = new ArrayList<String>();
        for (Map<String, Object> c : cases) {
            String text = (String) c.get("text");
            boolean ascii = true;
            for (int i = 0; i < text.length(); i++) {
                ascii &= text.charAt(i) < 128;
            }
            nonAscii += ascii ? 0 : 1;
            int[] want = ByteLevelBpeTest.ints(c.get("ids"));
            int[] got = tok.encode(text, true);
            if (!Arrays.equals(want, got)) {
                failures.add("encode '" + show(text) + "': want " + Arrays.toString(want) + " got "
                    + Arrays.toString(got));
            }
            if (!Arrays.equals(ByteLevelBpeTest.ints(c.get("ids_no_special")), tok.encode(text, false))) {
                failures.add("encode without specials '" + show(text) + "'");
            }
            if (!c.get("decoded").equals(tok.decode(want, true))) {
                failures.add("decode '" + show(text) + "': got '" + show(tok.decode(want, true)) + "'");
            }
        }
        assertTrue(cases.size() >= 1000, cases.size() + " cases");
        assertTrue(nonAscii >= 500, nonAscii + " non-ASCII cases");
        assertTrue(failures.isEmpty(), failures.size() + " mismatches of " + cases.size() + " cases, e.g. "
            + failures.subList(0, Math.min(5, failures.size())));
    }

    @Test
    void specialTokensVocabularySizeAndChatMarkers() throws Exception {
        ByteLevelBpe tok = SmolLM2Fixtures.tokenizer();
        assertEquals(49152, tok.size());
        assertEquals(0, tok.tokenId("<|endoftext|>"));
        assertEquals(1, tok.tokenId("<|im_start|>"));
        assertEquals(2, tok.tokenId("<|im_end|>"));
        int[] ids = tok.encode("<|im_start|>user\nHi<|im_end|>", false);
        assertEquals(1, ids[0]);
        assertEquals(2, ids[ids.length - 1]);
        assertEquals("user\nHi", tok.decode(ids, true));
        assertEquals("<|im_start|>user\nHi<|im_end|>", tok.decode(ids, false));
    }
}
