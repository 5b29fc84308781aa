package dev.mobiedit.demo.core;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.File;
import java.nio.file.Files;
import java.nio.file.Path;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

class Sha256Test {
    static final String ABC = "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad";

    @Test
    void knownVector(@TempDir Path dir) throws Exception {
        assertEquals(ABC, Sha256.hex("abc".getBytes("UTF-8")));
        File f = dir.resolve("abc.txt").toFile();
        Files.write(f.toPath(), "abc".getBytes("UTF-8"));
        assertEquals(ABC, Sha256.hexOfFile(f));
    }

    @Test
    void hexForm() {
        assertTrue(Sha256.isHex64(ABC));
        assertFalse(Sha256.isHex64(ABC.toUpperCase()));
        assertFalse(Sha256.isHex64(ABC.substring(1)));
        assertFalse(Sha256.isHex64(null));
    }

    @Test
    void atomicWriteReplacesAndLeavesNoTemporaryFile(@TempDir Path dir) throws Exception {
        File f = dir.resolve("sub/j.jsonl").toFile();
        Files2.writeTextAtomic(f, "one\n");
        Files2.writeTextAtomic(f, "two\n");
        assertEquals("two\n", Files2.readText(f));
        assertEquals(1, f.getParentFile().list().length);
    }
}
