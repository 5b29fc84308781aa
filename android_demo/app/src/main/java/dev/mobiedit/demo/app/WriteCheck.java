package dev.mobiedit.demo.app;

import dev.mobiedit.demo.core.EditPack;
import java.util.Arrays;

/**
 * The written-edit check one search asks for when the recipe's {@code success.stop_on} is
 * "written" ({@link EditObjective.Written}, export/ops.py search_bundle_edit's {@code written}):
 * the rank-one factors of the delta ({@link EditRunner#factors}, as after the search), put in the
 * first free slot next to the active edits and the bundle rechecked at delta 0
 * ({@link EditRunner#writtenHolds}, two program calls, not loss evaluations). Keeps the last
 * delta's factors and verdict: a search that stops there needs no second check afterwards
 * ({@link #at}). One search, one thread.
 */
final class WriteCheck implements EditObjective.Written {
    private final EditRunner runner;
    private final EditPack pack;
    private final float[][] slots;
    private final PrefixState state;
    private final SuccessCriterion rule;
    private float[] lastDelta;
    private float[][] lastFactors;
    private Boolean lastVerdict;

    /** For the search of {@code pack} from {@code state} with the active edits {@code slots}. */
    WriteCheck(EditRunner runner, EditPack pack, float[][] slots, PrefixState state,
            SuccessCriterion rule) {
        this.runner = runner;
        this.pack = pack;
        this.slots = slots;
        this.state = state;
        this.rule = rule;
    }

    @Override
    public Boolean holds(float[] delta) throws Exception {
        float[][] f = runner.factors(state, delta);
        Boolean verdict = runner.writtenHolds(pack, slots, f[0], f[1], rule);
        lastDelta = delta.clone();
        lastFactors = f;
        lastVerdict = verdict;
        return verdict;
    }

    /** Whether the last check was of exactly {@code delta} (bit for bit). */
    boolean at(float[] delta) {
        return lastDelta != null && Arrays.equals(lastDelta, delta);
    }

    /** The last check's factors {u, w} ({@link #at}). */
    float[][] factors() {
        return lastFactors;
    }

    /** The last check's verdict ({@link #at}): null when every slot was taken. */
    Boolean verdict() {
        return lastVerdict;
    }
}
