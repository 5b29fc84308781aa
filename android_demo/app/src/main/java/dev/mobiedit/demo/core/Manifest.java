package dev.mobiedit.demo.core;

import java.util.Collections;
import java.util.Map;

/**
 * A parsed, validated bundle manifest.json (docs/bundle_format.md, format version 1). Built only
 * by {@link ManifestReader}; all fields are immutable.
 */
public final class Manifest {
    /** Highest format_version this app reads. */
    public static final int FORMAT_VERSION = 1;
    /** Runtimes a bundle may name; this app executes only "executorch". */
    public static final String RUNTIME_EXECUTORCH = "executorch";
    public static final String RUNTIME_ONNX = "onnxruntime";
    /** Program names every bundle has. */
    public static final String[] PROGRAMS = {"prefill", "decode", "edit", "prefix"};

    /** Model sizes ("dims"). */
    public static final class Dims {
        public final int vocabSize;
        public final int hiddenSize;
        public final int intermediateSize;
        public final int numLayers;
        public final int numHeads;
        public final int numKvHeads;
        public final int headDim;

        Dims(int vocabSize, int hiddenSize, int intermediateSize, int numLayers, int numHeads,
                int numKvHeads, int headDim) {
            this.vocabSize = vocabSize;
            this.hiddenSize = hiddenSize;
            this.intermediateSize = intermediateSize;
            this.numLayers = numLayers;
            this.numHeads = numHeads;
            this.numKvHeads = numKvHeads;
            this.headDim = headDim;
        }
    }

    /** Static shapes of the exported programs ("shapes"). */
    public static final class Shapes {
        public final int maxSeqLen;
        public final int prefillChunk;
        /** Rows of deltas per edit-program call. */
        public final int editK;
        /** Prompt rows of one edit (rewrite prompts + KL prompt). */
        public final int editRows;
        public final int editSuffix;
        public final int editPrefix;
        public final int editReadouts;

        Shapes(int maxSeqLen, int prefillChunk, int editK, int editRows, int editSuffix,
                int editPrefix, int editReadouts) {
            this.maxSeqLen = maxSeqLen;
            this.prefillChunk = prefillChunk;
            this.editK = editK;
            this.editRows = editRows;
            this.editSuffix = editSuffix;
            this.editPrefix = editPrefix;
            this.editReadouts = editReadouts;
        }

        /** Token columns of the edit program's prompt batch (prefix + suffix positions). */
        public int editTokens() {
            return editPrefix + editSuffix;
        }
    }

    /** One "files" entry. */
    public static final class FileEntry {
        public final String sha256;
        public final long bytes;

        FileEntry(String sha256, long bytes) {
            this.sha256 = sha256;
            this.bytes = bytes;
        }
    }

    public final int formatVersion;
    public final String createdBy;
    public final String runtime;
    public final String modelFamily;
    public final String quantization;
    public final int editLayer;
    public final String editModule;
    public final Dims dims;
    public final Shapes shapes;
    public final int slots;
    public final int bos;
    public final int eos;
    public final int pad;
    /** Program name ("prefill", ...) to file name. */
    public final Map<String, String> programs;
    /** File name to its checksum entry (every file except the journal). */
    public final Map<String, FileEntry> files;

    Manifest(int formatVersion, String createdBy, String runtime, String modelFamily,
            String quantization, int editLayer, String editModule, Dims dims, Shapes shapes,
            int slots, int bos, int eos, int pad, Map<String, String> programs,
            Map<String, FileEntry> files) {
        this.formatVersion = formatVersion;
        this.createdBy = createdBy;
        this.runtime = runtime;
        this.modelFamily = modelFamily;
        this.quantization = quantization;
        this.editLayer = editLayer;
        this.editModule = editModule;
        this.dims = dims;
        this.shapes = shapes;
        this.slots = slots;
        this.bos = bos;
        this.eos = eos;
        this.pad = pad;
        this.programs = Collections.unmodifiableMap(programs);
        this.files = Collections.unmodifiableMap(files);
    }

    /** Length of the value delta = output size of the edited down_proj (hidden size). */
    public int dOut() {
        return dims.hiddenSize;
    }

    /** Input size of the edited down_proj (intermediate size). */
    public int dIn() {
        return dims.intermediateSize;
    }

    /** File name of a program ("prefill", "decode", "edit", "prefix"). */
    public String program(String name) {
        String f = programs.get(name);
        if (f == null) {
            throw new MobiEditError("no program '" + name + "'", "manifest.json, field 'programs'",
                "re-export the bundle with mobiedit export");
        }
        return f;
    }
}
