package dev.mobiedit.demo.core;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.ArrayList;
import java.util.List;
import org.junit.jupiter.api.Test;

class GenerationTest {
    /** A fake model that always continues with the ids of a fixed text, then eos. */
    static final class Scripted implements LanguageModel {
        final int[] script;
        final int vocab;
        final int eos;
        int pos;
        final List<Integer> calls = new ArrayList<>();

        Scripted(int[] script, int vocab, int eos) {
            this.script = script;
            this.vocab = vocab;
            this.eos = eos;
        }

        float[] logitsFor(int i) {
            float[] l = new float[vocab];
            l[i < script.length ? script[i] : eos] = 5f;
            return l;
        }

        @Override
        public float[] start(int[] ids) {
            pos = 0;
            calls.add(-ids.length);
            return logitsFor(pos);
        }

        @Override
        public float[] next(int id) {
            calls.add(id);
            return logitsFor(++pos);
        }

        @Override
        public int maxLength() {
            return 64;
        }
    }

    @Test
    void greedyStopsAtEosAndDecodes() throws Exception {
        ByteLevelBpe tok = Fixtures.tokenizer();
        int[] french = tok.encode(" French.", false);
        Scripted lm = new Scripted(french, tok.size(), 2);
        assertEquals(" French.", Generation.greedy(lm, tok, "Danielle Darrieux speaks", 10, 2));
        assertEquals(-tok.encode("Danielle Darrieux speaks", true).length, (int) lm.calls.get(0));
        assertEquals(tok.decode(new int[] {french[0]}, true), Generation.greedy(lm, tok, "x", 1, 2));
    }

    @Test
    void greedyRefusesTooLongPrompts() throws Exception {
        ByteLevelBpe tok = Fixtures.tokenizer();
        Scripted lm = new Scripted(new int[0], tok.size(), 2);
        StringBuilder sb = new StringBuilder();
        for (int i = 0; i < 100; i++) {
            sb.append("word ");
        }
        assertTrue(assertThrows(MobiEditError.class, () -> Generation.greedy(lm, tok, sb.toString(), 5, 2))
            .getMessage().contains("shorter prompt"));
    }

    @Test
    void contextTemplatesAreRomeShaped() throws Exception {
        ByteLevelBpe tok = Fixtures.tokenizer();
        Scripted lm = new Scripted(tok.encode(" is {a} city", false), tok.size(), 2);
        List<String> t = Generation.contextTemplates(lm, tok, 5, 2, 3, 0);
        assertEquals(5, t.size());
        assertEquals("{}", t.get(0));
        for (String s : t.subList(1, 5)) {
            assertTrue(s.endsWith(". {}"), s);
            assertEquals(1, EditRequest.count(s, "{}"), s);
        }
        assertEquals(t, Generation.contextTemplates(lm, tok, 5, 2, 3, 0));
    }

    @Test
    void argmaxTakesTheFirstMaximum() {
        assertEquals(1, Generation.argmax(new float[] {0, 3, 3, 1}));
    }
}
