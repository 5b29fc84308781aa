package dev.mobiedit.demo.core;

import java.io.File;
import java.io.IOException;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.Map;

/**
 * The journal's {@code base.safetensors} for {@link Journal} (mobiedit/journal.py
 * {@code _store_base}): the pre-edit weight of every module the journal has touched, keyed by
 * module name, added by the module's first edit (or by mobiedit export) and never changed. The
 * tensor_sha256 ({@link TensorHash}) of a module's tensor is the {@code base_sha256} of every
 * entry on that module.
 */
final class JournalBase {
    private JournalBase() {
    }

    /** {@link TensorHash} of base.safetensors[module] in {@code folder}; MobiEditError if absent. */
    static String sha256(File folder, String module) {
        File base = new File(folder, Journal.BASE_FILE);
        String fix = "re-export the bundle: journal/base.safetensors must hold the base weight of "
            + module;
        if (!base.isFile()) {
            throw new MobiEditError("missing", base.getPath(), fix);
        }
        try {
            Safetensors.Contents c = Safetensors.parse(Files2.read(base), base.getPath());
            Tensor t = c.tensors.get(module);
            if (t == null) {
                throw new MobiEditError("has no tensor '" + module + "'", base.getPath(), fix);
            }
            return TensorHash.of(t);
        } catch (IOException e) {
            throw new MobiEditError("cannot read (" + e.getMessage() + ")", base.getPath(), fix, e);
        }
    }

    /**
     * Add {@code target.module}'s base weight to base.safetensors in {@code folder} (atomic
     * rewrite keeping other modules); returns its tensor_sha256.
     */
    static String store(File folder, EditTarget target, Tensor base) {
        long[] shape = base.shape();
        long want = (long) target.dOut * target.dIn;
        if (shape.length != 2 || base.numel() != want) {
            throw new MobiEditError("base weight " + java.util.Arrays.toString(shape)
                + " does not fit the module [" + target.dOut + "x" + target.dIn + "]",
                "record(), argument 'baseWeight'", "pass the module's weight");
        }
        File path = new File(folder, Journal.BASE_FILE);
        Map<String, Tensor> tensors = new LinkedHashMap<String, Tensor>();
        try {
            if (path.isFile()) {
                tensors.putAll(Safetensors.parse(Files2.read(path), path.getPath()).tensors);
            }
            Tensor named = new Tensor(target.module, base.dtype, shape, base.raw());
            tensors.put(target.module, named);
            Map<String, String> meta = new LinkedHashMap<String, String>();
            meta.put("format", "mobiedit-journal-base");
            Files2.writeAtomic(path, Safetensors.write(new ArrayList<Tensor>(tensors.values()),
                meta));
            return TensorHash.of(named);
        } catch (IOException e) {
            throw new MobiEditError("cannot write (" + e.getMessage() + ")", path.getPath(),
                "free storage space and retry", e);
        }
    }
}
