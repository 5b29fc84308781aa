package dev.mobiedit.demo.core;

import java.io.ByteArrayOutputStream;
import java.io.File;
import java.io.FileInputStream;
import java.io.FileOutputStream;
import java.io.IOException;
import java.io.InputStream;
import java.nio.charset.Charset;
import java.util.Random;

/**
 * File helpers that work on Android API 23 (no java.nio.file): whole-file reads and crash-safe
 * writes (temporary file beside the destination, fsync, rename), the same invariant as
 * mobiedit/atomic.py — after a crash the destination holds the old or the new content.
 */
public final class Files2 {
    /** UTF-8 (StandardCharsets is API 19+, but Charset.forName keeps this explicit). */
    public static final Charset UTF8 = Charset.forName("UTF-8");
    private static final Random RANDOM = new Random();

    private Files2() {
    }

    /** All bytes of {@code file}. */
    public static byte[] read(File file) throws IOException {
        InputStream in = new FileInputStream(file);
        try {
            ByteArrayOutputStream out = new ByteArrayOutputStream((int) Math.max(16, file.length()));
            byte[] buf = new byte[1 << 16];
            int n;
            while ((n = in.read(buf)) > 0) {
                out.write(buf, 0, n);
            }
            return out.toByteArray();
        } finally {
            in.close();
        }
    }

    /** UTF-8 text of {@code file}. */
    public static String readText(File file) throws IOException {
        return new String(read(file), UTF8);
    }

    /** Write {@code data} to {@code dest} atomically (see class comment). */
    public static void writeAtomic(File dest, byte[] data) throws IOException {
        File dir = dest.getAbsoluteFile().getParentFile();
        if (!dir.isDirectory() && !dir.mkdirs()) {
            throw new IOException("cannot create folder " + dir);
        }
        File tmp;
        synchronized (RANDOM) {
            tmp = new File(dir, "." + dest.getName() + "." + Integer.toHexString(RANDOM.nextInt())
                + ".tmp");
        }
        boolean ok = false;
        try {
            FileOutputStream out = new FileOutputStream(tmp);
            try {
                out.write(data);
                out.flush();
                out.getFD().sync();
            } finally {
                out.close();
            }
            if (!tmp.renameTo(dest)) {
                throw new IOException("cannot rename " + tmp + " to " + dest);
            }
            ok = true;
        } finally {
            if (!ok && tmp.exists() && !tmp.delete()) {
                tmp.deleteOnExit();
            }
        }
    }

    /** Write UTF-8 {@code text} to {@code dest} atomically. */
    public static void writeTextAtomic(File dest, String text) throws IOException {
        writeAtomic(dest, text.getBytes(UTF8));
    }
}
