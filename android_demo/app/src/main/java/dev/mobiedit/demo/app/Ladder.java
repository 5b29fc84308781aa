package dev.mobiedit.demo.app;

import dev.mobiedit.demo.core.Recipe;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.atomic.AtomicBoolean;

/**
 * The clamp ladder (issue 16), as mobiedit/ladder.py defines it and export/ops.py's
 * {@code _edit_one} / {@code climb_bundle_edit} use it on a bundle: an edit that leaves at least
 * {@link Recipe#ladderFromEdits} edits on the bundle (the journal's active ones plus itself,
 * {@link #needsLadder}) tries its value change clamped to each fraction of the recipe's
 * {@link Recipe#ladder} times edit.objective.clamp_norm_factor in turn, smallest first, each rung
 * a whole search from delta = 0 (cold rungs, Python's default; {@code ladder_warm} false), and
 * keeps the first rung whose written edit holds ({@link EditOutcome#succeeded}, verify after
 * write), else the last. Fewer edits: one search at the manifest's clamp. A ladder of
 * {@code [1.0]} is one search at the manifest's clamp too (recorded as a one-rung climb).
 */
public final class Ladder {

    /** One rung's search: the whole search at {@code clampNormFactor}; null when cancelled. */
    public interface Attempt {
        EditOutcome attempt(double clampNormFactor, EditRunner.Answerer answerer,
            EditRunner.Listener listener) throws Exception;
    }

    private Ladder() {
    }

    /**
     * Whether an edit that leaves {@code editsOnModel} edits on the bundle (its own and those
     * already there) climbs: from {@code fromEdits} on (mobiedit/ladder.py needs_ladder).
     */
    public static boolean needsLadder(long editsOnModel, long fromEdits) {
        return editsOnModel >= fromEdits;
    }

    /** {@code fractions} x {@code clamp} (mobiedit/ladder.py sequential_ladder). */
    public static double[] sequentialLadder(double clamp, List<Double> fractions) {
        double[] out = new double[fractions.size()];
        for (int i = 0; i < out.length; i++) {
            out[i] = fractions.get(i) * clamp;
        }
        return out;
    }

    /**
     * The fractions an edit of a bundle with {@code activeEdits} active journal edits climbs:
     * the recipe's {@link Recipe#ladder} when {@link #needsLadder}(activeEdits + 1,
     * {@link Recipe#ladderFromEdits}), else none (one search at the manifest's clamp).
     */
    public static List<Double> fractionsFor(Recipe recipe, int activeEdits) {
        if (needsLadder(activeEdits + 1L, recipe.ladderFromEdits)) {
            return recipe.ladder;
        }
        return new ArrayList<Double>();
    }

    /**
     * Climb {@code fractions} (not empty) of {@code clamp} (mobiedit/ladder.py climb, cold
     * rungs): before each rung {@code listener.rung(i, n, fraction, clamp)}, then
     * {@code attempt} at that clamp, until a rung's outcome {@link EditOutcome#succeeded}. The
     * first rung gets {@code answerer} and the listener's {@code prepared}; later ones neither
     * (the before-answer is the same); progress reports loss evaluations summed over the rungs.
     * Returns {@link EditOutcome#climbed} of the rungs tried, or null when {@code cancel} was set
     * before a rung or an attempt returned null.
     */
    public static EditOutcome climb(List<Double> fractions, double clamp, Attempt attempt,
            EditRunner.Answerer answerer, EditRunner.Listener listener, AtomicBoolean cancel)
            throws Exception {
        if (fractions.isEmpty()) {
            throw new IllegalArgumentException("climb needs at least one clamp factor");
        }
        double[] clamps = sequentialLadder(clamp, fractions);
        List<EditOutcome> rungs = new ArrayList<EditOutcome>();
        long evals = 0;
        for (int i = 0; i < clamps.length; i++) {
            if (cancel != null && cancel.get()) {
                return null;
            }
            if (listener != null) {
                listener.rung(i + 1, clamps.length, fractions.get(i), clamps[i]);
            }
            EditRunner.Listener l =
                listener == null ? null : new RungListener(listener, i == 0, evals);
            EditOutcome o = attempt.attempt(clamps[i], i == 0 ? answerer : null, l);
            if (o == null) {
                return null;
            }
            rungs.add(o);
            evals += o.evals;
            if (o.succeeded) {
                break;
            }
        }
        return EditOutcome.climbed(rungs, clamps[rungs.size() - 1]);
    }

    /** A rung's view of the climb's listener: prepared once, evaluations summed over rungs. */
    private static final class RungListener implements EditRunner.Listener {
        private final EditRunner.Listener to;
        private final boolean first;
        private final long evalsBefore;

        RungListener(EditRunner.Listener to, boolean first, long evalsBefore) {
            this.to = to;
            this.first = first;
            this.evalsBefore = evalsBefore;
        }

        @Override
        public void prepared(String beforeAnswer) {
            if (first) {
                to.prepared(beforeAnswer);
            }
        }

        @Override
        public void progress(long step, double loss, long evals) {
            to.progress(step, loss, evalsBefore + evals);
        }

        @Override
        public void rung(int index, int count, double fraction, double clampNormFactor) {
            to.rung(index, count, fraction, clampNormFactor);
        }
    }
}
