package dev.mobiedit.demo.ui;

import android.app.Activity;
import android.app.AlertDialog;
import android.content.DialogInterface;
import android.os.Bundle;
import android.view.View;
import android.widget.AdapterView;
import android.widget.ArrayAdapter;
import android.widget.ListView;
import android.widget.TextView;
import dev.mobiedit.demo.R;
import dev.mobiedit.demo.app.BundleSession;
import dev.mobiedit.demo.app.Errors;
import dev.mobiedit.demo.app.Repair;
import dev.mobiedit.demo.core.JournalEntry;
import java.util.ArrayList;
import java.util.List;

/**
 * The bundle's edit journal (newest first; a repair names the edit it re-teaches); tap an applied
 * edit to undo it (with its repairs, BundleSession.undo).
 */
public final class JournalActivity extends Activity {
    private final List<JournalEntry> shown = new ArrayList<JournalEntry>();
    private ArrayAdapter<String> adapter;
    private TextView status;

    @Override
    protected void onCreate(Bundle saved) {
        super.onCreate(saved);
        setContentView(R.layout.activity_journal);
        status = (TextView) findViewById(R.id.journal_status);
        ListView list = (ListView) findViewById(R.id.journal_list);
        adapter = new ArrayAdapter<String>(this, android.R.layout.simple_list_item_1,
            new ArrayList<String>());
        list.setAdapter(adapter);
        list.setOnItemClickListener(new AdapterView.OnItemClickListener() {
            @Override
            public void onItemClick(AdapterView<?> parent, View view, int position, long id) {
                confirmUndo(shown.get(position));
            }
        });
    }

    @Override
    protected void onResume() {
        super.onResume();
        refresh();
    }

    private void refresh() {
        BundleSession s = DemoApp.of(this).session();
        shown.clear();
        adapter.clear();
        if (s == null) {
            status.setText(R.string.no_bundle);
            return;
        }
        List<JournalEntry> all = s.journal().entries();
        for (int i = all.size() - 1; i >= 0; i--) {
            JournalEntry e = all.get(i);
            shown.add(e);
            Long of = Repair.repairOf(e);
            adapter.add(e.label() + "\n" + e.status + " · " + e.timestamp
                + (of == null ? "" : " · " + getString(R.string.repair_of, of)));
        }
        status.setText(getString(R.string.journal_summary, all.size(), s.journal().active().size(),
            s.manifest().slots));
    }

    private void confirmUndo(final JournalEntry e) {
        if (!e.isActive()) {
            status.setText(getString(R.string.already_undone, e.id));
            return;
        }
        new AlertDialog.Builder(this)
            .setMessage(getString(R.string.undo_question, e.label()))
            .setPositiveButton(R.string.undo, new DialogInterface.OnClickListener() {
                @Override
                public void onClick(DialogInterface d, int which) {
                    undo(e.id);
                }
            })
            .setNegativeButton(android.R.string.cancel, null)
            .show();
    }

    private void undo(final long id) {
        final BundleSession s = DemoApp.of(this).session();
        DemoApp.of(this).run(new DemoApp.Job<JournalEntry>() {
            @Override
            protected JournalEntry work() {
                return s.undo(id);
            }

            @Override
            protected void done(JournalEntry e) {
                refresh();
            }

            @Override
            protected void failed(Throwable err) {
                status.setText(Errors.describe(err));
            }
        });
    }
}
