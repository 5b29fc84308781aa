package dev.mobiedit.demo.core;

import java.io.File;
import java.io.FileInputStream;
import java.io.IOException;
import java.io.InputStream;
import java.security.MessageDigest;
import java.security.NoSuchAlgorithmException;

/** SHA-256 as 64 lowercase hex digits (the form manifest.json and journal.jsonl use). */
public final class Sha256 {
    private static final char[] HEX = "0123456789abcdef".toCharArray();

    private Sha256() {
    }

    /** A fresh SHA-256 digest (every JVM and Android has it). */
    public static MessageDigest digest() {
        try {
            return MessageDigest.getInstance("SHA-256");
        } catch (NoSuchAlgorithmException e) {
            throw new IllegalStateException("SHA-256 is not available on this platform", e);
        }
    }

    /** Hex SHA-256 of {@code data}. */
    public static String hex(byte[] data) {
        return toHex(digest().digest(data));
    }

    /** Hex SHA-256 of a file's content, streamed. */
    public static String hexOfFile(File file) throws IOException {
        MessageDigest md = digest();
        InputStream in = new FileInputStream(file);
        try {
            byte[] buf = new byte[1 << 16];
            int n;
            while ((n = in.read(buf)) > 0) {
                md.update(buf, 0, n);
            }
        } finally {
            in.close();
        }
        return toHex(md.digest());
    }

    /** Lowercase hex of raw bytes. */
    public static String toHex(byte[] raw) {
        char[] out = new char[raw.length * 2];
        for (int i = 0; i < raw.length; i++) {
            out[2 * i] = HEX[(raw[i] >> 4) & 0xF];
            out[2 * i + 1] = HEX[raw[i] & 0xF];
        }
        return new String(out);
    }

    /** True for exactly 64 lowercase hex digits. */
    public static boolean isHex64(String s) {
        if (s == null || s.length() != 64) {
            return false;
        }
        for (int i = 0; i < 64; i++) {
            char c = s.charAt(i);
            if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) {
                return false;
            }
        }
        return true;
    }
}
