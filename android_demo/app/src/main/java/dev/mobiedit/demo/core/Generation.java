package dev.mobiedit.demo.core;

import java.util.ArrayList;
import java.util.List;
import java.util.Random;

/**
 * Decoding with a {@link LanguageModel}: greedy answers for the chat and the before/after
 * display, and ROME's context templates (top-5 sampling from seed words, as
 * mobiedit.editing.context.generate_context_templates; seeded java.util.Random, so the texts are
 * reproducible on the phone but not identical to the Python ones). Bundles carry the templates
 * generated at export (manifest edit.templates), which the app uses instead.
 */
public final class Generation {
    /** ROME's template seed words (ContextConfig.seeds). */
    public static final String[] SEEDS = {"The", "Therefore", "Because", "I", "You"};

    private Generation() {
    }

    /** Greedy continuation of {@code prompt}: at most {@code maxNew} tokens, stops at eos. */
    public static String greedy(LanguageModel lm, ByteLevelBpe tok, String prompt, int maxNew,
            int eos) throws Exception {
        return greedy(lm, tok, tok.encode(prompt, true), maxNew, eos);
    }

    /**
     * Greedy chat answer: {@code prompt} as the user turn of {@code chat} (with the generation
     * prompt), tokenized without the post-processor's specials, as transformers'
     * apply_chat_template(tokenize=True) does; stops at eos (ChatML: {@code <|im_end|>}).
     */
    public static String chat(LanguageModel lm, ByteLevelBpe tok, ChatTemplate chat, String prompt,
            int maxNew, int eos) throws Exception {
        return greedy(lm, tok, tok.encode(chat.userPrompt(prompt), false), maxNew, eos);
    }

    /** Greedy continuation of the token ids {@code ids}. */
    public static String greedy(LanguageModel lm, ByteLevelBpe tok, int[] ids, int maxNew, int eos)
            throws Exception {
        if (ids.length >= lm.maxLength()) {
            throw new MobiEditError("prompt is " + ids.length + " tokens, the model takes at most "
                + (lm.maxLength() - 1), "chat prompt", "type a shorter prompt");
        }
        float[] logits = lm.start(ids);
        List<Integer> out = new ArrayList<Integer>();
        int len = ids.length;
        while (out.size() < maxNew && len < lm.maxLength()) {
            int next = argmax(logits);
            if (next == eos) {
                break;
            }
            out.add(next);
            len++;
            if (out.size() < maxNew && len < lm.maxLength()) {
                logits = lm.next(next);
            }
        }
        int[] gen = new int[out.size()];
        for (int i = 0; i < gen.length; i++) {
            gen[i] = out.get(i);
        }
        return tok.decode(gen, true);
    }

    /**
     * "{}" plus {@code count - 1} generated templates "<text>. {}": the first half
     * {@code shortLen} tokens long, the rest {@code longLen} (ROME: 5 and 10).
     */
    public static List<String> contextTemplates(LanguageModel lm, ByteLevelBpe tok, int count,
            int shortLen, int longLen, long seed) throws Exception {
        List<String> out = new ArrayList<String>();
        out.add(EditRequest.SLOT);
        Random rng = new Random(seed);
        int generated = count - 1;
        for (int i = 0; i < generated; i++) {
            int length = i < generated / 2 ? shortLen : longLen;
            int inGroup = i < generated / 2 ? i : i - generated / 2;
            int[] ids = tok.encode(SEEDS[inGroup % SEEDS.length], true);
            List<Integer> seq = new ArrayList<Integer>();
            for (int id : ids) {
                seq.add(id);
            }
            float[] logits = lm.start(ids);
            for (int t = 0; t < length && seq.size() < lm.maxLength(); t++) {
                int next = sampleTopK(logits, 5, rng);
                seq.add(next);
                if (t + 1 < length) {
                    logits = lm.next(next);
                }
            }
            int[] all = new int[seq.size()];
            for (int k = 0; k < all.length; k++) {
                all[k] = seq.get(k);
            }
            String text = tok.decode(all, true).replace("{", " ").replace("}", " ").trim();
            out.add(text + ". {}");
        }
        return out;
    }

    /** Index of the largest logit (first one on ties, like torch.argmax). */
    public static int argmax(float[] logits) {
        int best = 0;
        for (int i = 1; i < logits.length; i++) {
            if (logits[i] > logits[best]) {
                best = i;
            }
        }
        return best;
    }

    /** Sample among the {@code k} largest logits with softmax weights. */
    static int sampleTopK(float[] logits, int k, Random rng) {
        k = Math.min(k, logits.length);
        int[] top = new int[k];
        boolean[] taken = new boolean[logits.length];
        for (int j = 0; j < k; j++) {
            int best = -1;
            for (int i = 0; i < logits.length; i++) {
                if (!taken[i] && (best < 0 || logits[i] > logits[best])) {
                    best = i;
                }
            }
            top[j] = best;
            taken[best] = true;
        }
        double[] p = new double[k];
        double sum = 0;
        for (int j = 0; j < k; j++) {
            p[j] = Math.exp(logits[top[j]] - logits[top[0]]);
            sum += p[j];
        }
        double u = rng.nextDouble() * sum;
        for (int j = 0; j < k; j++) {
            u -= p[j];
            if (u <= 0) {
                return top[j];
            }
        }
        return top[k - 1];
    }
}
