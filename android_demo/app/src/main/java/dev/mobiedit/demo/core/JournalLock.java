package dev.mobiedit.demo.core;

import java.io.File;
import java.io.IOException;
import java.io.RandomAccessFile;
import java.nio.channels.FileChannel;
import java.nio.channels.FileLock;
import java.nio.channels.OverlappingFileLockException;

/**
 * The journal's write lock, shared with mobiedit (mobiedit/journal_lock.py, docs/bundle_format.md
 * "Journal lock"): an exclusive lock on the whole file {@code journal/.lock}, taken with
 * {@link FileChannel#tryLock()} — on Linux / Android a POSIX record lock (fcntl F_SETLK), the
 * same lock Python's {@code fcntl.lockf} takes, so the app and {@code mobiedit edit --bundle} /
 * {@code mobiedit undo} exclude each other. Held from re-reading the journal to its last write;
 * a writer that cannot take it within the timeout fails with a {@link MobiEditError}. The file is
 * never deleted; the kernel releases the lock when its holder dies.
 */
public final class JournalLock {
    public static final String LOCK_FILE = ".lock";
    public static final long DEFAULT_TIMEOUT_MS = 60_000;

    private final RandomAccessFile file;
    private final FileLock lock;

    private JournalLock(RandomAccessFile file, FileLock lock) {
        this.file = file;
        this.lock = lock;
    }

    /** Take the lock of journal folder {@code folder}, waiting up to {@code timeoutMs}. */
    public static JournalLock acquire(File folder, long timeoutMs) {
        File path = new File(folder, LOCK_FILE);
        if (!folder.isDirectory() && !folder.mkdirs()) {
            throw new MobiEditError("cannot create the journal folder", folder.getPath(),
                "check storage permissions");
        }
        long deadline = System.currentTimeMillis() + timeoutMs;
        try {
            RandomAccessFile raf = new RandomAccessFile(path, "rw");
            try {
                FileChannel ch = raf.getChannel();
                while (true) {
                    FileLock l = null;
                    try {
                        l = ch.tryLock();
                    } catch (OverlappingFileLockException e) {
                        l = null; // held by another thread of this process
                    }
                    if (l != null) {
                        return new JournalLock(raf, l);
                    }
                    if (System.currentTimeMillis() >= deadline) {
                        throw new MobiEditError("another process is writing this journal; waited "
                            + timeoutMs / 1000 + " s", path.getPath(),
                            "wait for the other edit / undo to finish and run again");
                    }
                    Thread.sleep(50);
                }
            } catch (RuntimeException | IOException | InterruptedException e) {
                raf.close();
                throw e;
            }
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new MobiEditError("interrupted while waiting for the journal lock", path.getPath(),
                "retry", e);
        } catch (IOException e) {
            throw new MobiEditError("cannot lock (" + e.getMessage() + ")", path.getPath(),
                "check storage permissions", e);
        }
    }

    /** Release the lock (idempotent). */
    public void release() {
        try {
            if (lock.isValid()) {
                lock.release();
            }
            file.close();
        } catch (IOException e) {
            // closing the file releases the lock as well
        }
    }
}
