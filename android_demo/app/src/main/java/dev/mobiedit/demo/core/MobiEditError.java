package dev.mobiedit.demo.core;

/**
 * A user-facing error: what is wrong, where (file / line / field) and how to fix it, formatted
 * like the Python package's errors: {@code "<where>: <message> — fix: <fix>"}.
 */
public class MobiEditError extends RuntimeException {
    private static final long serialVersionUID = 1L;
    private final String where;
    private final String fix;
    private final String detail;

    /** {@code where} and {@code fix} may be null. */
    public MobiEditError(String message, String where, String fix) {
        this(message, where, fix, null);
    }

    /** As above, with the underlying cause. */
    public MobiEditError(String message, String where, String fix, Throwable cause) {
        super(format(message, where, fix), cause);
        this.where = where;
        this.fix = fix;
        this.detail = message;
    }

    /** The record / field / file the error concerns, or null. */
    public String where() {
        return where;
    }

    /** What the user should do, or null. */
    public String fix() {
        return fix;
    }

    /** The message without where / fix. */
    public String detail() {
        return detail;
    }

    private static String format(String message, String where, String fix) {
        String s = where == null ? message : where + ": " + message;
        return fix == null ? s : s + " — fix: " + fix;
    }
}
