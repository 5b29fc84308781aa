package dev.mobiedit.demo.ui;

import android.app.Activity;
import android.content.Intent;
import android.os.Bundle;
import android.view.View;
import android.widget.Button;
import android.widget.EditText;
import android.widget.TextView;
import dev.mobiedit.demo.R;
import dev.mobiedit.demo.app.BundleSession;
import dev.mobiedit.demo.app.Errors;
import dev.mobiedit.demo.core.Manifest;
import dev.mobiedit.demo.core.ManifestReader;
import dev.mobiedit.demo.runtime.ExecuTorchRuntime;
import java.io.File;

/** Load a bundle (checksums verified) and chat with the on-device model (greedy decoding). */
public final class MainActivity extends Activity {
    private TextView status;
    private EditText path;
    private EditText prompt;
    private TextView transcript;
    private Button ask;

    @Override
    protected void onCreate(Bundle saved) {
        super.onCreate(saved);
        setContentView(R.layout.activity_main);
        status = (TextView) findViewById(R.id.status);
        path = (EditText) findViewById(R.id.bundle_path);
        prompt = (EditText) findViewById(R.id.chat_prompt);
        transcript = (TextView) findViewById(R.id.transcript);
        ask = (Button) findViewById(R.id.ask);
        File ext = getExternalFilesDir(null);
        if (saved == null && ext != null) {
            path.setText(new File(ext, "bundle").getPath());
        }
        findViewById(R.id.load).setOnClickListener(new View.OnClickListener() {
            @Override
            public void onClick(View v) {
                load();
            }
        });
        ask.setOnClickListener(new View.OnClickListener() {
            @Override
            public void onClick(View v) {
                ask();
            }
        });
        findViewById(R.id.open_edit).setOnClickListener(new View.OnClickListener() {
            @Override
            public void onClick(View v) {
                startActivity(new Intent(MainActivity.this, EditActivity.class));
            }
        });
        findViewById(R.id.open_journal).setOnClickListener(new View.OnClickListener() {
            @Override
            public void onClick(View v) {
                startActivity(new Intent(MainActivity.this, JournalActivity.class));
            }
        });
        showSession();
    }

    private void showSession() {
        BundleSession s = DemoApp.of(this).session();
        boolean loaded = s != null;
        ask.setEnabled(loaded);
        findViewById(R.id.open_edit).setEnabled(loaded);
        findViewById(R.id.open_journal).setEnabled(loaded);
        if (loaded) {
            Manifest m = s.manifest();
            status.setText(getString(R.string.loaded, s.folder().getName(), m.modelFamily,
                m.quantization, s.journal().active().size()));
        }
    }

    private void load() {
        final File dir = new File(path.getText().toString().trim());
        status.setText(R.string.loading);
        DemoApp.of(this).run(new DemoApp.Job<BundleSession>() {
            @Override
            protected BundleSession work() throws Exception {
                return BundleSession.open(dir, ExecuTorchRuntime.FACTORY,
                    new ManifestReader.Progress() {
                        @Override
                        public void checking(final String name, final int i, final int n) {
                            DemoApp.of(MainActivity.this).post(new Runnable() {
                                @Override
                                public void run() {
                                    status.setText(getString(R.string.checking, name, i + 1, n));
                                }
                            });
                        }
                    });
            }

            @Override
            protected void done(BundleSession s) {
                DemoApp.of(MainActivity.this).setSession(s);
                showSession();
            }

            @Override
            protected void failed(Throwable e) {
                status.setText(Errors.describe(e));
            }
        });
    }

    private void ask() {
        final BundleSession s = DemoApp.of(this).session();
        final String q = prompt.getText().toString();
        if (s == null || q.trim().length() == 0) {
            return;
        }
        ask.setEnabled(false);
        transcript.append("\n> " + q);
        DemoApp.of(this).run(new DemoApp.Job<String>() {
            @Override
            protected String work() throws Exception {
                return s.chat(q);
            }

            @Override
            protected void done(String answer) {
                // a chat answer is a reply, a plain answer continues the prompt
                transcript.append("\n" + (s.chats() ? answer.trim() : q + answer));
                ask.setEnabled(true);
            }

            @Override
            protected void failed(Throwable e) {
                transcript.append("\n" + Errors.describe(e));
                ask.setEnabled(true);
            }
        });
    }
}
