package dev.mobiedit.demo.app;

/** Thrown inside the loop's callbacks when the user cancelled; the run then stops. */
public final class Cancelled extends Exception {
    private static final long serialVersionUID = 1L;

    public Cancelled() {
        super("edit cancelled by the user");
    }
}
