package dev.mobiedit.demo.runtime;

import dev.mobiedit.demo.app.BundlePrograms;
import dev.mobiedit.demo.app.ModelRuntime;
import dev.mobiedit.demo.app.ProgramExecutor;
import dev.mobiedit.demo.core.HostTensor;
import dev.mobiedit.demo.core.Manifest;
import dev.mobiedit.demo.core.MobiEditError;
import java.io.File;
import java.util.LinkedHashMap;
import java.util.Map;
import org.pytorch.executorch.EValue;
import org.pytorch.executorch.Module;
import org.pytorch.executorch.Tensor;

/**
 * The bundle's ExecuTorch programs (org.pytorch:executorch-android): ONE {@link Module} per
 * program file — an ExecuTorch bundle has one {@code model.pte} holding the methods "prefill",
 * "decode", "prefix" and "edit" — and {@code Module.execute(programs.<role>.method, inputs)}.
 * Which tensors go in, in which order, is {@link BundlePrograms}' job (docs/bundle_format.md
 * "Program interfaces", the manifest's input / output names); this class only converts
 * {@link HostTensor}s to ExecuTorch tensors and back. Outputs are copied into Java arrays at once
 * (ExecuTorch's output tensors alias the method's planned memory).
 *
 * <p>Every program input is float32 ({@code Tensor.fromBlob(float[], shape)}) or int64
 * ({@code Tensor.fromBlob(long[], shape)}); the exporter takes even the edit program's
 * {@code mask} as int64 because the ExecuTorch Java API has no bool tensors. Not thread-safe (one
 * worker thread); Module.execute is locked per module.
 */
public final class ExecuTorchRuntime implements ProgramExecutor {
    private static final String HINT =
        "check the ExecuTorch log (adb logcat -s ExecuTorch) and re-export the bundle";
    private final Map<String, Module> modules = new LinkedHashMap<String, Module>();

    private ExecuTorchRuntime(File dir, Manifest m) {
        try {
            for (String role : Manifest.PROGRAMS) {
                Manifest.Program p = m.program(role);
                Module mod = modules.get(p.file);
                if (mod == null) {
                    mod = load(new File(dir, p.file));
                    modules.put(p.file, mod);
                }
                int err = mod.loadMethod(p.method);
                if (err != 0) {
                    throw new MobiEditError("cannot load method '" + p.method + "' (ExecuTorch"
                        + " error 0x" + Integer.toHexString(err) + ")", new File(dir, p.file).getPath()
                        + ", program '" + role + "'",
                        "re-export the bundle for this app's ExecuTorch version");
                }
            }
        } catch (RuntimeException e) {
            close();
            throw e;
        }
    }

    /** Factory for BundleSession.open: the bundle's programs over ExecuTorch. */
    public static final ModelRuntime.Factory FACTORY = new ModelRuntime.Factory() {
        @Override
        public ModelRuntime open(File dir, Manifest manifest) {
            return new BundlePrograms(manifest, new ExecuTorchRuntime(dir, manifest));
        }
    };

    private static Module load(File f) {
        try {
            return Module.load(f.getAbsolutePath());
        } catch (RuntimeException e) {
            throw new MobiEditError("ExecuTorch cannot load the program file (" + e.getMessage()
                + ")", f.getPath(), "re-export the bundle for this app's ExecuTorch version", e);
        }
    }

    @Override
    public HostTensor[] execute(Manifest.Program p, HostTensor[] inputs) {
        Module mod = modules.get(p.file);
        EValue[] in = new EValue[inputs.length];
        for (int i = 0; i < in.length; i++) {
            in[i] = EValue.from(toExecuTorch(inputs[i]));
        }
        String where = p.role + " program (method '" + p.method + "' of " + p.file + ")";
        EValue[] out;
        try {
            out = mod.execute(p.method, in);
        } catch (RuntimeException e) {
            throw new MobiEditError("ExecuTorch failed (" + e.getMessage() + ")", where, HINT, e);
        }
        if (out == null || out.length == 0) {
            throw new MobiEditError("returned no outputs", where, HINT);
        }
        HostTensor[] res = new HostTensor[out.length];
        for (int i = 0; i < out.length; i++) {
            Tensor t = out[i].toTensor();
            try {
                res[i] = HostTensor.f32(t.getDataAsFloatArray(), t.shape());
            } catch (IllegalStateException e) {
                throw new MobiEditError("output " + i + " is not float32 (" + t + ")", where,
                    "re-export the bundle with this app's version of mobiedit", e);
            }
        }
        return res;
    }

    private static Tensor toExecuTorch(HostTensor t) {
        switch (t.dtype) {
            case F32:
                return Tensor.fromBlob(t.floats(), t.shape());
            default:
                return Tensor.fromBlob(t.longs(), t.shape());
        }
    }

    @Override
    public void close() {
        for (Module mod : modules.values()) {
            mod.destroy();
        }
        modules.clear();
    }
}
