package dev.mobiedit.demo.ui;

import android.app.Application;
import android.content.Context;
import android.os.Handler;
import android.os.Looper;
import dev.mobiedit.demo.app.BundleSession;
import dev.mobiedit.demo.app.EditOutcome;
import dev.mobiedit.demo.core.EditStateMachine;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.atomic.AtomicBoolean;

/**
 * App-wide state that outlives Activities: the loaded bundle, the edit screen's state machine,
 * the found-but-not-applied edit, and the single worker thread every model call runs on.
 */
public final class DemoApp extends Application {
    private final ExecutorService worker = Executors.newSingleThreadExecutor();
    private final Handler main = new Handler(Looper.getMainLooper());
    private final EditStateMachine editState = new EditStateMachine();
    private BundleSession session;
    private EditOutcome pending;
    private AtomicBoolean cancel = new AtomicBoolean();

    /** A background job: work() on the worker thread, then done() or failed() on the UI thread. */
    public abstract static class Job<T> {
        protected abstract T work() throws Exception;

        protected void done(T result) {
        }

        protected void failed(Throwable error) {
        }
    }

    public static DemoApp of(Context c) {
        return (DemoApp) c.getApplicationContext();
    }

    /** Run {@code job} on the worker thread. */
    public <T> void run(final Job<T> job) {
        worker.execute(new Runnable() {
            @Override
            public void run() {
                try {
                    final T result = job.work();
                    post(new Runnable() {
                        @Override
                        public void run() {
                            job.done(result);
                        }
                    });
                } catch (final Throwable t) {
                    post(new Runnable() {
                        @Override
                        public void run() {
                            job.failed(t);
                        }
                    });
                }
            }
        });
    }

    /** Run {@code r} on the UI thread. */
    public void post(Runnable r) {
        main.post(r);
    }

    public EditStateMachine editState() {
        return editState;
    }

    public synchronized BundleSession session() {
        return session;
    }

    /** Replace the loaded bundle (closing the old one on the worker thread). */
    public synchronized void setSession(final BundleSession s) {
        final BundleSession old = session;
        session = s;
        if (old != null && old != s) {
            worker.execute(new Runnable() {
                @Override
                public void run() {
                    old.close();
                }
            });
        }
    }

    public synchronized EditOutcome pending() {
        return pending;
    }

    public synchronized void setPending(EditOutcome o) {
        pending = o;
    }

    /** A fresh cancel flag for a new edit. */
    public synchronized AtomicBoolean newCancelFlag() {
        cancel = new AtomicBoolean();
        return cancel;
    }

    public synchronized void requestCancel() {
        cancel.set(true);
    }
}
