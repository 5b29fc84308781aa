package dev.mobiedit.demo.app;

import dev.mobiedit.demo.core.ByteLevelBpe;
import dev.mobiedit.demo.core.EditPack;
import dev.mobiedit.demo.core.Fixtures;
import dev.mobiedit.demo.core.LanguageModel;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;

/**
 * Fake prefix + edit programs that hold facts, for the repair tests: the request is read back
 * from its pack (the subject from row 0's tokens, the answer from row 0's target labels). Each
 * subject {@link #SUBJECTS}[i] has the one-hot key e_i (k_cur = k̄), so with the fixture's
 * identity C^-1 a written edit's w is e_i: it moves only its subject's value, by its u. The value
 * of a subject is the sum of the u of the slots on its key (slot s counts only if s &lt;
 * {@link #liveSlots}); an answer {@link #ANSWERS}[j] has the target vector {@link #target}(j);
 * loss(delta) = ||value + delta - target||^2 / ||target||^2 and every rewrite row is fully
 * correct when it is below {@link #HOLDS_BELOW} (as {@link QuadraticPrograms}). So two edits of
 * one subject with different answers overwrite each other (whatever their prompts), edits of
 * different subjects never interfere. v_init = ones (scale 1).
 */
final class FactPrograms implements EditPrograms {
    static final int D = Fixtures.D_OUT;
    static final int D_IN = Fixtures.D_IN;
    static final double HOLDS_BELOW = 0.02;
    static final String[] SUBJECTS = {"Danielle Darrieux", "Paris"};
    static final String[] ANSWERS = {"English", "French", "German", "Italian", "Spanish"};

    private final ByteLevelBpe tok;
    private final int batchRows;
    /** Slots whose index is at least this have no effect (a written edit that misses). */
    int liveSlots = Integer.MAX_VALUE;
    int prefixCalls;
    int editCalls;
    EditPack lastPack;
    /** slot_u of every prefix call, in order. */
    final List<float[]> slotUs = new ArrayList<float[]>();
    /** Chat starts of {@link #runtime} (before / after answers) and the slot_u it was last given. */
    int chats;
    float[] slotsSet;

    FactPrograms(ByteLevelBpe tok, int batchRows) {
        this.tok = tok;
        this.batchRows = batchRows;
    }

    /** The target vector of answer {@code j} (norm about 2.4, any two closer than 5). */
    static float[] target(int j) {
        float[] t = new float[D];
        for (int i = 0; i < D; i++) {
            t[i] = (float) (1.2 * Math.sin(1.7 * i + 1.3 * j + 0.5));
        }
        return t;
    }

    /** The index of the subject (or answer) of {@code names} that {@code text} contains. */
    private static int find(String[] names, String text) {
        for (int i = 0; i < names.length; i++) {
            if (text.contains(names[i])) {
                return i;
            }
        }
        throw new IllegalArgumentException("no known name in '" + text + "'");
    }

    @Override
    public PrefixState prefix(EditPack pack, float[] slotU, float[] slotW) {
        prefixCalls++;
        lastPack = pack;
        slotUs.add(slotU.clone());
        long[] ids = pack.prefixFeed().get("input_ids").longs();
        int n = ids.length / pack.shapes.editRows;
        int[] row0 = new int[n];
        for (int i = 0; i < n; i++) {
            row0[i] = (int) ids[i];
        }
        int subject = find(SUBJECTS, tok.decode(row0, true));
        long[] labels = pack.staticFeed().get("target_label").longs();
        int[] answer = new int[pack.targetLen];
        for (int i = 0; i < answer.length; i++) {
            answer[i] = (int) labels[i];
        }
        float[] key = new float[D_IN];
        key[subject] = 1f;
        float[] value = new float[D];
        for (int s = 0; s < Math.min(liveSlots, slotU.length / D); s++) {
            double dot = 0;
            for (int j = 0; j < D_IN; j++) {
                dot += (double) slotW[s * D_IN + j] * key[j];
            }
            for (int i = 0; i < D; i++) {
                value[i] += (float) (slotU[s * D + i] * dot);
            }
        }
        float[] vInit = new float[D];
        Arrays.fill(vInit, 1f);
        float[][] handle = {value, target(find(ANSWERS, tok.decode(answer, true)))};
        return new PrefixState(handle, key, key.clone(), new float[D], vInit);
    }

    @Override
    public void edit(PrefixState st, float[] deltas, float[] losses, float[] correct) {
        editCalls++;
        float[][] h = (float[][]) st.handle;
        int nRewrite = correct.length / batchRows;
        int targetLen = lastPack.targetLen;
        for (int r = 0; r < batchRows; r++) {
            double err = 0;
            double norm = 0;
            for (int i = 0; i < D; i++) {
                double e = h[0][i] + deltas[r * D + i] - h[1][i];
                err += e * e;
                norm += (double) h[1][i] * h[1][i];
            }
            double l = err / norm;
            losses[r] = (float) l;
            for (int j = 0; j < nRewrite; j++) {
                correct[r * nRewrite + j] = l < HOLDS_BELOW ? targetLen : targetLen - 1;
            }
        }
    }

    @Override
    public int batchRows() {
        return batchRows;
    }

    /** A runtime over these programs whose chat answers nothing (eos at once). */
    ModelRuntime runtime(final int eos) {
        final FactPrograms self = this;
        return new ModelRuntime() {
            @Override
            public LanguageModel chat() {
                return new LanguageModel() {
                    float[] logits() {
                        float[] l = new float[400];
                        l[eos] = 1f;
                        return l;
                    }

                    @Override
                    public float[] start(int[] ids) {
                        chats++;
                        return logits();
                    }

                    @Override
                    public float[] next(int id) {
                        return logits();
                    }

                    @Override
                    public int maxLength() {
                        return 256;
                    }
                };
            }

            @Override
            public EditPrograms edit() {
                return self;
            }

            @Override
            public void setSlots(float[] u, float[] w) {
                slotsSet = u.clone();
            }

            @Override
            public void close() {
            }
        };
    }
}
