package dev.mobiedit.demo.core;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.BufferedReader;
import java.io.File;
import java.io.InputStreamReader;
import java.nio.file.Files;
import java.nio.file.Path;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/** Issue 19: one writer per bundle journal across processes, and foreign journals refused. */
class JournalLockTest {
    /** Holds the lock of the folder args[0] until killed (run in a second JVM by the test). */
    public static final class Holder {
        public static void main(String[] args) throws Exception {
            JournalLock.acquire(new File(args[0]), 5_000);
            System.out.println("locked");
            System.out.flush();
            Thread.sleep(60_000);
        }
    }

    @Test
    void aSecondWriterKeepsTheFirstWritersEditAndNeverReusesItsId(@TempDir Path tmp) throws Exception {
        File dir = JournalTest.pyJournalCopy(tmp);
        Journal app = Journal.open(dir);    // opened first, e.g. when the app loaded the bundle
        Journal other = Journal.open(dir);  // another writer (mobiedit edit --bundle)
        EditRequest req = EditRequest.fromForm("Lionel Messi", "{} plays", "cricket");
        JournalEntry a = other.record(req, JournalTest.TARGET, new float[] {1, 2, 3, 4}, new float[6], null, null, "t");
        JournalEntry b = app.record(req, JournalTest.TARGET, new float[] {4, 3, 2, 1}, new float[6], null, null, "t");
        assertEquals(3, a.id);
        assertEquals(4, b.id);
        Journal again = Journal.open(dir);
        assertEquals(4, again.entries().size());
        assertEquals(a.sha256, again.entry(3).sha256);
        other.undo(4);
        app.undo(3);  // re-read under the lock: the other writer's undo of 4 is kept
        assertEquals(0, Journal.open(dir).active().size() - 1);
        assertEquals("undone", Journal.open(dir).entry(4).status);
    }

    @Test
    void aLockHeldByAnotherProcessMakesTheWriterWaitThenFail(@TempDir Path tmp) throws Exception {
        File dir = JournalTest.pyJournalCopy(tmp);
        String java = System.getProperty("java.home") + File.separator + "bin" + File.separator + "java";
        String cp = new File(Holder.class.getProtectionDomain().getCodeSource().getLocation().toURI()).getPath()
            + File.pathSeparator
            + new File(JournalLock.class.getProtectionDomain().getCodeSource().getLocation().toURI()).getPath();
        Process p = new ProcessBuilder(java, "-cp", cp, Holder.class.getName(), dir.getPath())
            .redirectErrorStream(true).start();
        try {
            BufferedReader r = new BufferedReader(new InputStreamReader(p.getInputStream(), "UTF-8"));
            assertEquals("locked", r.readLine());
            long t0 = System.nanoTime();
            MobiEditError e = assertThrows(MobiEditError.class, () -> JournalLock.acquire(dir, 300));
            assertTrue(System.nanoTime() - t0 >= 250_000_000L);
            assertTrue(e.getMessage().contains("another process is writing this journal"), e.getMessage());
            assertTrue(e.where().endsWith(JournalLock.LOCK_FILE), e.where());
            EditRequest req = EditRequest.fromForm("Lionel Messi", "{} plays", "cricket");
            String before = Files2.readText(new File(dir, Journal.JOURNAL_FILE));
            p.destroyForcibly().waitFor();  // the kernel drops a dead holder's lock
            JournalLock.acquire(dir, 5_000).release();
            Journal.open(dir).record(req, JournalTest.TARGET, new float[4], new float[6], null, null, "t");
            assertTrue(Files2.readText(new File(dir, Journal.JOURNAL_FILE)).startsWith(before));
        } finally {
            p.destroyForcibly();
        }
    }

    /**
     * The app and mobiedit exclude each other: a lock taken by Python's {@code fcntl.lockf} (what
     * mobiedit/journal_lock.py takes) makes the app wait, then fail; a BSD {@code flock} would not.
     */
    @Test
    void aLockHeldByPythonLockfExcludesTheApp(@TempDir Path tmp) throws Exception {
        File dir = tmp.resolve("journal").toFile();
        assertTrue(dir.mkdirs());
        String py = "import fcntl, os, sys, time\n"
            + "fd = os.open(os.path.join(sys.argv[1], '.lock'), os.O_RDWR | os.O_CREAT, 0o666)\n"
            + "fcntl.lockf(fd, fcntl.LOCK_EX)\n"
            + "print('locked', flush=True)\n"
            + "time.sleep(60)\n";
        Process p = new ProcessBuilder("python3", "-c", py, dir.getPath()).redirectErrorStream(true).start();
        try {
            BufferedReader r = new BufferedReader(new InputStreamReader(p.getInputStream(), "UTF-8"));
            assertEquals("locked", r.readLine());
            MobiEditError e = assertThrows(MobiEditError.class, () -> JournalLock.acquire(dir, 300));
            assertTrue(e.getMessage().contains("another process is writing this journal"), e.getMessage());
            p.destroyForcibly().waitFor();
            JournalLock.acquire(dir, 5_000).release();
        } finally {
            p.destroyForcibly();
        }
    }

    @Test
    void aLockFileAloneDoesNotMakeAFolderForeign(@TempDir Path tmp) throws Exception {
        File dir = tmp.resolve("journal").toFile();
        JournalLock.acquire(dir, 1_000).release();
        assertTrue(new File(dir, JournalLock.LOCK_FILE).isFile());
        assertTrue(Journal.open(dir).entries().isEmpty());
    }

    @Test
    void aJournalOfAnotherModelIsRefused(@TempDir Path tmp) throws Exception {
        Journal j = Journal.open(JournalTest.pyJournalCopy(tmp));
        File py = Fixtures.resource("py_journal/base.safetensors");
        Tensor base = Safetensors.parse(Files2.read(py), "py").get(Fixtures.MODULE, "py");
        JournalGuard.checkBelongs(j, base, Fixtures.MODULE);  // its own base: fine
        float[] other = new float[24];
        other[5] = 1f;
        Tensor foreign = Tensor.f32("base_weight", new long[] {4, 6}, other);
        MobiEditError e = assertThrows(MobiEditError.class, () -> JournalGuard.checkBelongs(j, foreign, Fixtures.MODULE));
        assertTrue(e.where().endsWith("edit 1, field 'base_sha256'"), e.where());
        MobiEditError m = assertThrows(MobiEditError.class, () -> JournalGuard.checkBelongs(j, base, "model.layers.0.mlp.down_proj"));
        assertTrue(m.where().endsWith("field 'module'"), m.where());
        assertTrue(Files.exists(new File(j.folder(), Journal.JOURNAL_FILE).toPath()));
    }
}
