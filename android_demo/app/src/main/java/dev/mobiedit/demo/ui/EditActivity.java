package dev.mobiedit.demo.ui;

import android.app.Activity;
import android.content.SharedPreferences;
import android.os.Bundle;
import android.view.View;
import android.widget.Button;
import android.widget.CheckBox;
import android.widget.CompoundButton;
import android.widget.EditText;
import android.widget.ProgressBar;
import android.widget.TextView;
import dev.mobiedit.demo.R;
import dev.mobiedit.demo.app.BundleSession;
import dev.mobiedit.demo.app.EditOutcome;
import dev.mobiedit.demo.app.EditRunner;
import dev.mobiedit.demo.app.Errors;
import dev.mobiedit.demo.app.Repair;
import dev.mobiedit.demo.core.EditRequest;
import dev.mobiedit.demo.core.EditStateMachine;
import dev.mobiedit.demo.core.EditStateMachine.Phase;
import dev.mobiedit.demo.core.JournalEntry;
import dev.mobiedit.demo.core.Recipe;
import java.util.List;
import java.util.concurrent.atomic.AtomicBoolean;

/**
 * Teach a fact: subject, prompt, new answer → the native edit loop (forwards on the bundle's
 * edit program; the clamp ladder's rungs when the bundle carries edits, {@code app.Ladder}) with
 * live step / loss / rung, early stop, the written edit's verdict, then Apply (journal + slot) or
 * Discard, and the before / after answers. With "repair" checked (a preference, off by default,
 * as Python's {@code --repair}), Apply then rechecks the earlier edits and repairs lost ones
 * ({@code BundleSession.repairAfter}; Cancel stops the repairs) and the status line says how many.
 * All state lives in {@link EditStateMachine} (survives rotation).
 */
public final class EditActivity extends Activity implements EditStateMachine.Listener {
    private static final String PREFS = "mobiedit";
    private static final String PREF_REPAIR = "repair";
    private EditText subject;
    private EditText prompt;
    private EditText answer;
    private Button edit;
    private Button cancel;
    private Button apply;
    private Button discard;
    private TextView statusLine;
    private TextView before;
    private TextView after;
    private ProgressBar progress;
    private CheckBox repair;

    @Override
    protected void onCreate(Bundle saved) {
        super.onCreate(saved);
        setContentView(R.layout.activity_edit);
        subject = (EditText) findViewById(R.id.subject);
        prompt = (EditText) findViewById(R.id.prompt);
        answer = (EditText) findViewById(R.id.new_answer);
        edit = (Button) findViewById(R.id.edit);
        cancel = (Button) findViewById(R.id.cancel);
        apply = (Button) findViewById(R.id.apply);
        discard = (Button) findViewById(R.id.discard);
        statusLine = (TextView) findViewById(R.id.status_line);
        before = (TextView) findViewById(R.id.before);
        after = (TextView) findViewById(R.id.after);
        progress = (ProgressBar) findViewById(R.id.progress);
        repair = (CheckBox) findViewById(R.id.repair);
        final SharedPreferences prefs = getSharedPreferences(PREFS, MODE_PRIVATE);
        repair.setChecked(prefs.getBoolean(PREF_REPAIR, false));
        repair.setOnCheckedChangeListener(new CompoundButton.OnCheckedChangeListener() {
            @Override
            public void onCheckedChanged(CompoundButton b, boolean checked) {
                prefs.edit().putBoolean(PREF_REPAIR, checked).apply();
            }
        });
        progress.setMax(stepsShown());
        edit.setOnClickListener(new View.OnClickListener() {
            @Override
            public void onClick(View v) {
                startEdit();
            }
        });
        cancel.setOnClickListener(new View.OnClickListener() {
            @Override
            public void onClick(View v) {
                machine().cancel();
                DemoApp.of(EditActivity.this).requestCancel();
            }
        });
        apply.setOnClickListener(new View.OnClickListener() {
            @Override
            public void onClick(View v) {
                applyEdit();
            }
        });
        discard.setOnClickListener(new View.OnClickListener() {
            @Override
            public void onClick(View v) {
                DemoApp.of(EditActivity.this).setPending(null);
                machine().discard();
            }
        });
    }

    @Override
    protected void onResume() {
        super.onResume();
        machine().setListener(this);
        changed(machine());
    }

    @Override
    protected void onPause() {
        machine().setListener(null);
        super.onPause();
    }

    /** The progress bar's range: max_steps of the loaded bundle's recipe. */
    private int stepsShown() {
        BundleSession s = DemoApp.of(this).session();
        long n = s != null ? s.recipe().maxSteps : Recipe.shippedFallback(1).maxSteps;
        return (int) Math.min(n, Integer.MAX_VALUE);
    }

    private EditStateMachine machine() {
        return DemoApp.of(this).editState();
    }

    private void startEdit() {
        final BundleSession s = DemoApp.of(this).session();
        if (s == null) {
            statusLine.setText(R.string.no_bundle);
            return;
        }
        progress.setMax(stepsShown());
        final EditRequest req = machine().submit(subject.getText().toString(),
            prompt.getText().toString(), answer.getText().toString());
        if (req == null) {
            return;
        }
        final DemoApp app = DemoApp.of(this);
        final AtomicBoolean flag = app.newCancelFlag();
        final EditRunner.Listener events = new EditRunner.Listener() {
            @Override
            public void prepared(final String beforeAnswer) {
                app.post(new Runnable() {
                    @Override
                    public void run() {
                        machine().prepared(beforeAnswer);
                    }
                });
            }

            @Override
            public void progress(final long step, final double loss, final long evals) {
                app.post(new Runnable() {
                    @Override
                    public void run() {
                        machine().progress(step, loss, evals);
                    }
                });
            }

            @Override
            public void rung(final int index, final int count, final double fraction,
                    double clampNormFactor) {
                app.post(new Runnable() {
                    @Override
                    public void run() {
                        machine().rung(index, count, fraction);
                    }
                });
            }
        };
        app.run(new DemoApp.Job<EditOutcome>() {
            @Override
            protected EditOutcome work() throws Exception {
                return s.edit(req, events, flag);
            }

            @Override
            protected void done(EditOutcome o) {
                if (o == null) {
                    machine().cancelled();
                    return;
                }
                app.setPending(o);
                // SUCCEEDED / NOT_CONVERGED follow the written edit's verdict (verify after write)
                machine().finished(o.status.name(), o.succeeded,
                    o.verified ? Boolean.valueOf(o.loopSucceeded) : null, o.steps, o.evals);
            }

            @Override
            protected void failed(Throwable e) {
                machine().failed(Errors.describe(e));
            }
        });
    }

    private void applyEdit() {
        final DemoApp app = DemoApp.of(this);
        final BundleSession s = app.session();
        final EditOutcome o = app.pending();
        if (s == null || o == null) {
            return;
        }
        machine().apply();
        s.setRepair(repair.isChecked());
        final AtomicBoolean flag = app.newCancelFlag();
        final Repair.Listener events = new Repair.Listener() {
            @Override
            public void repairing(final JournalEntry lost, int index, int count) {
                app.post(new Runnable() {
                    @Override
                    public void run() {
                        machine().repairing(lost.id);
                    }
                });
            }

            @Override
            public void prepared(String beforeAnswer) {
            }

            @Override
            public void progress(long step, double loss, long evals) {
            }

            @Override
            public void rung(int index, int count, double fraction, double clampNormFactor) {
            }
        };
        app.run(new DemoApp.Job<Object[]>() {
            @Override
            protected Object[] work() throws Exception {
                JournalEntry e = s.apply(o);
                List<Repair.Result> r = s.repairAfter(e, events, flag);
                int done = Repair.applied(r);
                return new Object[] {e.id, s.answer(o.request.rewritePrompt()), done,
                    r.size() - done};
            }

            @Override
            protected void done(Object[] r) {
                app.setPending(null);
                machine().applied((Long) r[0], (String) r[1], (Integer) r[2], (Integer) r[3]);
            }

            @Override
            protected void failed(Throwable e) {
                machine().failed(Errors.describe(e));
            }
        });
    }

    @Override
    public void changed(EditStateMachine m) {
        statusLine.setText(m.statusLine());
        edit.setEnabled(m.canSubmit());
        cancel.setEnabled(m.canCancel());
        apply.setEnabled(m.canApply());
        discard.setEnabled(m.canApply());
        progress.setProgress((int) Math.min(m.step(), progress.getMax()));
        progress.setVisibility(m.phase() == Phase.IDLE ? View.INVISIBLE : View.VISIBLE);
        EditRequest r = m.request();
        String p = r == null ? "" : r.rewritePrompt();
        before.setText(m.before() == null ? "" : getString(R.string.before, p, m.before()));
        after.setText(m.after() == null ? "" : getString(R.string.after, p, m.after()));
    }
}
