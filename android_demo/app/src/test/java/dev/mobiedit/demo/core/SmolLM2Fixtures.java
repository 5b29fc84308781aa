package dev.mobiedit.demo.core;

import java.io.ByteArrayOutputStream;
import java.io.File;
import java.io.FileInputStream;
import java.io.IOException;
import java.io.InputStream;
import java.util.zip.GZIPInputStream;

/** SmolLM2-135M-Instruct's tokenizer and chat template (tools/make_smollm2_tokenizer_fixture.py). */
final class SmolLM2Fixtures {
    private static ByteLevelBpe tokenizer;

    private SmolLM2Fixtures() {
    }

    /** The model's tokenizer.json (stored gzipped: 0.6 MB instead of 3.5 MB), parsed once. */
    static synchronized ByteLevelBpe tokenizer() throws IOException {
        if (tokenizer == null) {
            File f = Fixtures.resource("smollm2/tokenizer.json.gz");
            tokenizer = ByteLevelBpe.fromJson(gunzip(f), f.getPath());
        }
        return tokenizer;
    }

    static String text(String name) throws IOException {
        return Files2.readText(Fixtures.resource("smollm2/" + name));
    }

    private static String gunzip(File f) throws IOException {
        InputStream in = new GZIPInputStream(new FileInputStream(f));
        try {
            ByteArrayOutputStream out = new ByteArrayOutputStream();
            byte[] buf = new byte[1 << 16];
            for (int n; (n = in.read(buf)) > 0; ) {
                out.write(buf, 0, n);
            }
            return new String(out.toByteArray(), Files2.UTF8);
        } finally {
            in.close();
        }
    }
}
