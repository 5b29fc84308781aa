package dev.mobiedit.demo.core;

import java.util.ArrayList;
import java.util.Collections;
import java.util.List;

/**
 * The edit screen's state: which phase the edit is in, its progress and results, and which
 * buttons are enabled. Pure logic (no Android); the screen calls the user events, the worker
 * thread's results arrive through the run events (posted to the UI thread).
 *
 * <pre>
 *  IDLE --submit(valid)--> PREPARING --prepared--> RUNNING --finished--> SUCCEEDED | NOT_CONVERGED
 *  PREPARING / RUNNING --rung--> (same phase: a clamp ladder's next rung, shown in the status)
 *  PREPARING / RUNNING --cancel--> CANCELLING --cancelled / finished--> CANCELLED
 *  SUCCEEDED | NOT_CONVERGED --apply--> APPLYING --applied--> APPLIED
 *  APPLYING --repairing--> APPLYING (repairing a lost earlier edit, shown in the status)
 *  APPLYING --cancel--> APPLYING (stop the repairs, the running one unrecorded; the edit stays)
 *  SUCCEEDED | NOT_CONVERGED --discard--> IDLE
 *  PREPARING | RUNNING | CANCELLING | APPLYING --failed--> FAILED
 *  APPLIED | FAILED | CANCELLED --submit--> (as from IDLE);  --reset--> IDLE
 * </pre>
 * SUCCEEDED / NOT_CONVERGED follow the outcome's {@code succeeded}: the written edit's verdict
 * (verify after write) when it could be taken, else the loop's. An invalid submit stays in its
 * phase and sets {@link #error()} (naming the form field). An event not allowed in the current
 * phase throws IllegalStateException naming both. The machine holds the phase and its rules; the
 * current edit's data and its status line are an {@link EditRun}.
 */
public final class EditStateMachine {

    /** Phases of one edit. */
    public enum Phase {
        IDLE, PREPARING, RUNNING, SUCCEEDED, NOT_CONVERGED, CANCELLING, CANCELLED, APPLYING,
        APPLIED, FAILED
    }

    /** Told after every change. */
    public interface Listener {
        void changed(EditStateMachine machine);
    }

    private Phase phase = Phase.IDLE;
    private Listener listener;
    /** The current edit's data (a new one for each edit); guarded by this machine's lock. */
    private EditRun run = new EditRun();

    /** Set (or clear with null) the listener. */
    public synchronized void setListener(Listener l) {
        listener = l;
    }

    // ------------------------------------------------------------------ user events

    /**
     * Validate the form; if valid, start (PREPARING) and return the request, else keep the phase,
     * set {@link #error()} and return null.
     */
    public synchronized EditRequest submit(String subject, String prompt, String newAnswer) {
        require("submit", Phase.IDLE, Phase.APPLIED, Phase.FAILED, Phase.CANCELLED);
        EditRequest r;
        try {
            r = EditRequest.fromForm(subject, prompt, newAnswer);
        } catch (MobiEditError e) {
            run.error = e.getMessage();
            notifyListener();
            return null;
        }
        run = new EditRun();
        run.request = r;
        phase = Phase.PREPARING;
        notifyListener();
        return r;
    }

    /** Ask the running edit (or, APPLYING, the repairs) to stop; see the diagram. */
    public synchronized void cancel() {
        require("cancel", Phase.PREPARING, Phase.RUNNING, Phase.APPLYING);
        if (phase == Phase.APPLYING) {
            run.stopping = true;
        } else {
            phase = Phase.CANCELLING;
        }
        notifyListener();
    }

    /** Start recording the found edit in the journal. */
    public synchronized void apply() {
        require("apply", Phase.SUCCEEDED, Phase.NOT_CONVERGED);
        phase = Phase.APPLYING;
        notifyListener();
    }

    /** Drop the found edit (nothing is recorded). */
    public synchronized void discard() {
        require("discard", Phase.SUCCEEDED, Phase.NOT_CONVERGED);
        run = new EditRun();
        phase = Phase.IDLE;
        notifyListener();
    }

    /** Back to IDLE from a finished edit. */
    public synchronized void reset() {
        require("reset", Phase.APPLIED, Phase.FAILED, Phase.CANCELLED, Phase.IDLE);
        run = new EditRun();
        phase = Phase.IDLE;
        notifyListener();
    }

    // ------------------------------------------------------------------ run events

    /** The batch and prefix state are ready; {@code beforeAnswer} is the unedited answer. */
    public synchronized void prepared(String beforeAnswer) {
        if (phase == Phase.CANCELLING) {
            run.before = beforeAnswer;
            return;
        }
        require("prepared", Phase.PREPARING);
        run.before = beforeAnswer;
        phase = Phase.RUNNING;
        notifyListener();
    }

    /** One loop step done: forward calls so far, its base loss, loss evaluations so far. */
    public synchronized void progress(long stepsDone, double baseLoss, long evalsDone) {
        if (phase == Phase.CANCELLING) {
            return;
        }
        require("progress", Phase.RUNNING);
        run.step = stepsDone;
        run.loss = baseLoss;
        run.evals = evalsDone;
        run.losses.add(baseLoss);
        notifyListener();
    }

    /**
     * A rung of the clamp ladder starts: {@code index} (1-based) of {@code count}, its
     * {@code fraction} of the manifest's clamp. Ignored while cancelling.
     */
    public synchronized void rung(int index, int count, double fraction) {
        if (phase == Phase.CANCELLING) {
            return;
        }
        require("rung", Phase.PREPARING, Phase.RUNNING);
        run.rung = index;
        run.rungs = count;
        run.rungFraction = fraction;
        notifyListener();
    }

    /**
     * The loop stopped with {@code engineStatus} ("SUCCESS_CHECK", "MAX_STEPS", ...);
     * {@code succeeded} says whether the edit holds (early stop or final check).
     */
    public synchronized void finished(String engineStatus, boolean succeeded, long stepsDone,
            long evalsDone) {
        finished(engineStatus, succeeded, null, stepsDone, evalsDone);
    }

    /**
     * The edit's search stopped with {@code engineStatus} ("SUCCESS_CHECK", "MAX_STEPS", ...);
     * {@code succeeded}: the verdict that counts (the written edit's, when verified), which picks
     * SUCCEEDED or NOT_CONVERGED; {@code loopSucceeded}: the search's own verdict when the written
     * one was taken, else null (then {@code succeeded} is the loop's).
     */
    public synchronized void finished(String engineStatus, boolean succeeded,
            Boolean loopSucceeded, long stepsDone, long evalsDone) {
        require("finished", Phase.RUNNING, Phase.CANCELLING);
        run.status = engineStatus;
        run.loopSucceeded = loopSucceeded;
        run.step = stepsDone;
        run.evals = evalsDone;
        if (phase == Phase.CANCELLING) {
            phase = Phase.CANCELLED;
        } else {
            phase = succeeded ? Phase.SUCCEEDED : Phase.NOT_CONVERGED;
        }
        notifyListener();
    }

    /** The worker stopped because of cancel(). */
    public synchronized void cancelled() {
        require("cancelled", Phase.CANCELLING, Phase.PREPARING, Phase.RUNNING);
        phase = Phase.CANCELLED;
        notifyListener();
    }

    /** The edit was recorded as journal entry {@code id}; {@code afterAnswer} is the new answer. */
    public synchronized void applied(long id, String afterAnswer) {
        applied(id, afterAnswer, 0, 0);
    }

    /** {@link #applied(long, String)}, then this many repairs recorded / attempted in vain. */
    public synchronized void applied(long id, String afterAnswer, int repairedCount,
            int unrepairedCount) {
        require("applied", Phase.APPLYING);
        run.editId = id;
        run.after = afterAnswer;
        run.repaired = repairedCount;
        run.unrepaired = unrepairedCount;
        run.repairingId = -1;
        phase = Phase.APPLIED;
        notifyListener();
    }

    /** While APPLYING: the repair of lost earlier edit {@code lostId} starts. */
    public synchronized void repairing(long lostId) {
        require("repairing", Phase.APPLYING);
        run.repairingId = lostId;
        notifyListener();
    }

    /** Something failed while busy; {@code message} names what and how to fix it. */
    public synchronized void failed(String message) {
        require("failed", Phase.PREPARING, Phase.RUNNING, Phase.CANCELLING, Phase.APPLYING);
        run.error = message;
        phase = Phase.FAILED;
        notifyListener();
    }

    // ------------------------------------------------------------------ queries

    public synchronized Phase phase() {
        return phase;
    }

    /** The request being edited, or null. */
    public synchronized EditRequest request() {
        return run.request;
    }

    /** Validation or failure message, or null. */
    public synchronized String error() {
        return run.error;
    }

    public synchronized String before() {
        return run.before;
    }

    public synchronized String after() {
        return run.after;
    }

    /** Engine status name once finished, else null. */
    public synchronized String status() {
        return run.status;
    }

    public synchronized long step() {
        return run.step;
    }

    public synchronized long evals() {
        return run.evals;
    }

    /** The search's own verdict once finished, if the written one was taken; else null. */
    public synchronized Boolean loopSucceeded() {
        return run.loopSucceeded;
    }

    /** The clamp ladder's current rung (1-based; 0: no ladder), of {@link #rungs()}. */
    public synchronized int rung() {
        return run.rung;
    }

    public synchronized int rungs() {
        return run.rungs;
    }

    /** Last base loss (NaN before the first step). */
    public synchronized double loss() {
        return run.loss;
    }

    /** Base loss of every step so far. */
    public synchronized List<Double> losses() {
        return Collections.unmodifiableList(new ArrayList<Double>(run.losses));
    }

    /** Journal id of the applied edit, or -1. */
    public synchronized long editId() {
        return run.editId;
    }

    /** True while the worker thread owns the edit. */
    public synchronized boolean isBusy() {
        return phase == Phase.PREPARING || phase == Phase.RUNNING || phase == Phase.CANCELLING
            || phase == Phase.APPLYING;
    }

    public synchronized boolean canSubmit() {
        return phase == Phase.IDLE || phase == Phase.APPLIED || phase == Phase.FAILED
            || phase == Phase.CANCELLED;
    }

    public synchronized boolean canCancel() {
        return phase == Phase.PREPARING || phase == Phase.RUNNING
            || phase == Phase.APPLYING && !run.stopping;
    }

    public synchronized boolean canApply() {
        return phase == Phase.SUCCEEDED || phase == Phase.NOT_CONVERGED;
    }

    /** One line for the progress label. */
    public synchronized String statusLine() {
        return run.statusLine(phase);
    }

    private void require(String event, Phase... allowed) {
        for (Phase p : allowed) {
            if (p == phase) {
                return;
            }
        }
        throw new IllegalStateException("edit screen: event '" + event
            + "' is not allowed in phase " + phase);
    }

    private void notifyListener() {
        if (listener != null) {
            listener.changed(this);
        }
    }
}
