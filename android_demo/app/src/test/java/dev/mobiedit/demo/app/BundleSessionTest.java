package dev.mobiedit.demo.app;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.mobiedit.demo.core.EditRequest;
import dev.mobiedit.demo.core.Files2;
import dev.mobiedit.demo.core.Fixtures;
import dev.mobiedit.demo.core.Journal;
import dev.mobiedit.demo.core.JournalEntry;
import dev.mobiedit.demo.core.LanguageModel;
import dev.mobiedit.demo.core.Manifest;
import dev.mobiedit.demo.core.MobiEditError;
import dev.mobiedit.demo.core.Tensor;
import dev.mobiedit.demo.core.TensorHash;
import dev.mobiedit.demo.jni.Jni;
import java.io.File;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Arrays;
import java.util.Map;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/** A bundle on disk + a fake runtime: load, chat, edit (real engine), apply, undo, reopen. */
class BundleSessionTest {
    @BeforeAll
    static void lib() {
        Jni.require();
    }

    /** Chat model that answers " English" once slot 0 holds an edit, else " French". */
    static final class FakeRuntime implements ModelRuntime {
        final QuadraticPrograms programs = new QuadraticPrograms(17);
        float[] slotU;
        int starts;
        /** The prompt ids of the last start() call. */
        int[] lastIds;
        final int[] french;
        final int[] english;

        FakeRuntime() throws Exception {
            french = Fixtures.tokenizer().encode(" French", false);
            english = Fixtures.tokenizer().encode(" English", false);
        }

        boolean edited() {
            for (float v : slotU) {
                if (v != 0) {
                    return true;
                }
            }
            return false;
        }

        @Override
        public LanguageModel chat() {
            return new LanguageModel() {
                int pos;

                float[] logits() {
                    int[] s = edited() ? english : french;
                    float[] l = new float[400];
                    l[pos < s.length ? s[pos] : 2] = 1f;
                    return l;
                }

                @Override
                public float[] start(int[] ids) {
                    starts++;
                    lastIds = ids.clone();
                    pos = 0;
                    return logits();
                }

                @Override
                public float[] next(int id) {
                    pos++;
                    return logits();
                }

                @Override
                public int maxLength() {
                    return 256;  // room for a chat turn spelled in the fixture tokenizer's bytes
                }
            };
        }

        @Override
        public EditPrograms edit() {
            return programs;
        }

        @Override
        public void setSlots(float[] u, float[] w) {
            assertEquals(2 * Fixtures.D_OUT, u.length);
            assertEquals(2 * Fixtures.D_IN, w.length);
            slotU = u.clone();
        }

        @Override
        public void close() {
        }
    }

    @Test
    void loadEditApplyUndoReopen(@TempDir Path tmp) throws Exception {
        File dir = tmp.resolve("bundle").toFile();
        Fixtures.writeBundle(dir, Fixtures.baseWeight());
        FakeRuntime rt = new FakeRuntime();
        BundleSession s = BundleSession.open(dir, (d, m) -> rt, null);
        Manifest m = s.manifest();
        assertEquals(Fixtures.MODULE, m.editModule);
        assertEquals(" French", s.answer("The mother tongue of Danielle Darrieux is"));

        EditRequest req = EditRequest.fromForm("Danielle Darrieux", "The mother tongue of Danielle Darrieux is", "English");
        EditRunner.Listener quiet = new EditRunner.Listener() {
            @Override
            public void prepared(String before) {
                assertEquals(" French", before);
            }

            @Override
            public void progress(long step, double loss, long evals) {
            }

            @Override
            public void rung(int index, int count, double fraction, double clamp) {
                throw new AssertionError("the first edit of an empty bundle does not climb");
            }
        };
        EditOutcome o = s.edit(req, quiet, null);
        assertTrue(o.succeeded && o.verified && o.loopSucceeded);
        assertEquals(0, o.ladderTries, "one active edit after it, the recipe's from_edits is 2");
        assertEquals(Fixtures.TEMPLATES, s.templates());
        assertEquals(2, rt.programs.prefixCalls, "the search, then the written edit's check");
        assertEquals(2, rt.programs.lastPack.nRewrite, "one row per manifest template");
        assertEquals(2, rt.starts, "the before-answer only: templates come from the manifest");

        JournalEntry e = s.apply(o);
        assertEquals(1, e.id);
        assertEquals("mobiedit", e.method);
        assertEquals(Fixtures.D_OUT, e.dOut);
        Tensor base = Tensor.f32("b", new long[] {Fixtures.D_OUT, Fixtures.D_IN}, Fixtures.baseWeight());
        assertEquals(TensorHash.of(base), e.baseSha256);
        // the first edit stored keystats' base_weight in the journal, as mobiedit/journal.py does
        Tensor stored = dev.mobiedit.demo.core.Safetensors.parse(Files2.read(new File(dir, "journal/base.safetensors")),
            "base").get(Fixtures.MODULE, "base");
        assertEquals(TensorHash.of(base), TensorHash.of(stored));
        assertArrayEquals(o.u, Arrays.copyOf(rt.slotU, Fixtures.D_OUT));
        assertEquals(" English", s.answer("The mother tongue of Danielle Darrieux is"));
        assertTrue(e.timestamp.matches("\\d{4}-\\d\\d-\\d\\dT\\d\\d:\\d\\d:\\d\\d\\.\\d{6}\\+00:00"), e.timestamp);

        s.undo(1);
        assertEquals(" French", s.answer("The mother tongue of Danielle Darrieux is"));
        s.close();

        FakeRuntime rt2 = new FakeRuntime();
        BundleSession again = BundleSession.open(dir, (d, mm) -> rt2, null);
        assertEquals(1, again.journal().entries().size());
        assertEquals("undone", again.journal().entry(1).status);
        @SuppressWarnings("unchecked")
        Map<String, Object> metrics = again.journal().entry(1).metrics;
        assertEquals(true, metrics.get("succeeded"));
        assertEquals(true, metrics.get("loop_succeeded"));
        assertTrue(Files2.readText(new File(dir, "journal/" + Journal.JOURNAL_FILE)).contains("\"status\": \"undone\""));
    }

    /** A fixture bundle whose manifest carries {@code template} as its chat template. */
    @SuppressWarnings("unchecked")
    private static File chatBundle(Path tmp, String name, String template, boolean chatDefault) throws Exception {
        File dir = tmp.resolve(name).toFile();
        Map<String, Object> m = Fixtures.writeBundle(dir, Fixtures.baseWeight());
        File tf = new File(dir, "chat_template.jinja");
        Files.write(tf.toPath(), template.getBytes("UTF-8"));
        ((Map<String, Object>) m.get("files")).put("chat_template.jinja",
            Fixtures.map("sha256", dev.mobiedit.demo.core.Sha256.hexOfFile(tf), "bytes", tf.length()));
        m.put("chat", Fixtures.map("template_file", "chat_template.jinja", "default", chatDefault));
        Files.write(new File(dir, "manifest.json").toPath(),
            dev.mobiedit.demo.core.Json.write(m, true).getBytes("UTF-8"));
        return dir;
    }

    @Test
    void chatsThroughTheBundlesTemplateWhenItsManifestSaysSo(@TempDir Path tmp) throws Exception {
        String smol = Files2.readText(Fixtures.resource("smollm2/chat_template.jinja"));
        String q = "Where is Paris?";
        FakeRuntime rt = new FakeRuntime();
        BundleSession s = BundleSession.open(chatBundle(tmp, "chat", smol, true), (d, m) -> rt, null);
        assertTrue(s.chats());
        assertEquals(" French", s.chat(q));
        String turn = dev.mobiedit.demo.core.ChatTemplate.parse(smol, "t").userPrompt(q);
        assertTrue(turn.startsWith("<|im_start|>system\n") && turn.endsWith("<|im_start|>assistant\n"), turn);
        assertArrayEquals(s.tokenizer().encode(turn, false), rt.lastIds);
        assertEquals(" French", s.answer(q));  // the edit screen's answers stay plain completions
        assertArrayEquals(s.tokenizer().encode(q, true), rt.lastIds);

        FakeRuntime plainRt = new FakeRuntime();
        BundleSession plain = BundleSession.open(chatBundle(tmp, "plain", smol, false), (d, m) -> plainRt, null);
        assertTrue(!plain.chats());
        plain.chat(q);
        assertArrayEquals(plain.tokenizer().encode(q, true), plainRt.lastIds);

        String llama3 = "{% for message in messages %}{{ '<|start_header_id|>' + message['role'] }}{% endfor %}";
        File foreign = chatBundle(tmp, "foreign", llama3, true);
        MobiEditError e = assertThrows(MobiEditError.class,
            () -> BundleSession.open(foreign, (d, m) -> new FakeRuntime(), null));
        assertTrue(e.getMessage().contains("chat_template.jinja") && e.getMessage().contains("ChatML"),
            e.getMessage());
    }

    @Test
    void refusesCorruptOrForeignBundles(@TempDir Path tmp) throws Exception {
        File dir = tmp.resolve("bundle").toFile();
        Fixtures.writeBundle(dir, Fixtures.baseWeight());
        Files.write(new File(dir, "tokenizer.json").toPath(), "{}".getBytes("UTF-8"));
        MobiEditError e = assertThrows(MobiEditError.class,
            () -> BundleSession.open(dir, (d, m) -> new FakeRuntime(), null));
        assertTrue(e.getMessage().contains("files['tokenizer.json']"), e.getMessage());

        File onnx = tmp.resolve("onnx").toFile();
        Fixtures.writeBundle(onnx, Fixtures.baseWeight());
        File mf = new File(onnx, "manifest.json");
        Files.write(mf.toPath(), Files2.readText(mf).replace("\"executorch\"", "\"onnxruntime\"").getBytes("UTF-8"));
        e = assertThrows(MobiEditError.class,
            () -> BundleSession.open(onnx, (d, m) -> new FakeRuntime(), null));
        assertTrue(e.fix().contains("--runtime executorch"), e.getMessage());
    }
}
