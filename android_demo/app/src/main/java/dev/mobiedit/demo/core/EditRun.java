package dev.mobiedit.demo.core;

import dev.mobiedit.demo.core.EditStateMachine.Phase;
import java.util.ArrayList;
import java.util.List;

/**
 * What {@link EditStateMachine} knows of the current edit besides its phase: the request, the
 * validation / failure message, the answers before and after, the search's progress and verdict,
 * the clamp ladder's rung, the journal id and, while applying, the repairs; and the status line
 * that shows them in a given phase. A new edit starts from a new EditRun (everything cleared).
 * Not thread-safe: only the machine touches it, under its lock.
 */
final class EditRun {
    EditRequest request;
    String error;
    String before;
    String after;
    String status;
    long step;
    long evals;
    double loss = Double.NaN;
    /** The search's own verdict once finished (null: not reported, or the write not verified). */
    Boolean loopSucceeded;
    int rung;
    int rungs;
    double rungFraction = Double.NaN;
    final List<Double> losses = new ArrayList<Double>();
    long editId = -1;
    /** While APPLYING: the earlier edit being repaired (-1: none), cancel() asked to stop. */
    long repairingId = -1;
    boolean stopping;
    int repaired;
    int unrepaired;

    /** One line for the progress label, in {@code phase}. */
    String statusLine(Phase phase) {
        switch (phase) {
            case IDLE:
                return error != null ? error : "Type a fact and press Edit.";
            case PREPARING:
                return "Preparing (tokenising, prefix forward)…" + rungText();
            case RUNNING:
                return "Step " + step + "  loss " + fmt(loss) + "  (" + evals + " loss evaluations)"
                    + rungText();
            case SUCCEEDED:
                return (earlyStop() ? "Early stop after " : "Stopped after ") + step + " steps ("
                    + status + "), loss " + fmt(loss) + rungText()
                    + (loopSucceeded != null ? "; the written edit says it" : "")
                    + ". Apply to keep it.";
            case NOT_CONVERGED:
                if (Boolean.TRUE.equals(loopSucceeded)) {  // the search's check passed
                    return (earlyStop() ? "Early stop after " : "Stopped after ") + step
                        + " steps (" + status + ")" + rungText()
                        + ", but the written edit does not say it. Apply anyway or discard.";
                }
                return "Stopped after " + step + " steps (" + status + ")" + rungText()
                    + " without the edit holding. Apply anyway or discard.";
            case CANCELLING:
                return "Cancelling…";
            case CANCELLED:
                return "Cancelled.";
            case APPLYING:
                if (stopping) {
                    return "Stopping the repairs…";
                }
                return repairingId < 0 ? "Recording the edit…"
                    : "Repairing edit #" + repairingId + " (lost after this edit)…";
            case APPLIED:
                return "Applied as edit #" + editId + (repaired > 0 ? "; repaired " + repaired
                    + " earlier edit(s)" : "") + (unrepaired > 0 ? "; " + unrepaired
                    + " lost earlier edit(s) could not be repaired" : "") + ".";
            default:
                return "Failed: " + error;
        }
    }

    /** True when the search stopped early on its own success. */
    private boolean earlyStop() {
        return "SUCCESS_CHECK".equals(status) || "SUCCESS_LOSS".equals(status);
    }

    /** "  clamp 0.5 (rung 1 of 3)" during / after a ladder climb, else "". */
    private String rungText() {
        if (rungs == 0) {
            return "";
        }
        return "  clamp " + new java.math.BigDecimal(Double.toString(rungFraction))
            .stripTrailingZeros().toPlainString() + " (rung " + rung + " of " + rungs + ")";
    }

    private static String fmt(double v) {
        return Double.isNaN(v) ? "–" : String.format(java.util.Locale.ROOT, "%.4f", v);
    }
}
