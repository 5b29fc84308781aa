package dev.mobiedit.demo.core;

/**
 * What an edit changes: the bundle's edit module, its layer, model family and factor sizes, plus
 * the method name recorded in the journal. Built from the manifest by {@link #of(Manifest)}.
 */
public final class EditTarget {
    /** Journal "method" of edits made by this app (same as the Python MobiEdit method). */
    public static final String METHOD = "mobiedit";

    public final String module;
    public final int layer;
    public final String family;
    /** True for [out, in] weights (nn.Linear: llama, qwen2, qwen3, mistral); false for GPT-2. */
    public final boolean weightOutIn;
    public final int dOut;
    public final int dIn;
    public final String method;

    public EditTarget(String module, int layer, String family, boolean weightOutIn, int dOut,
            int dIn, String method) {
        this.module = module;
        this.layer = layer;
        this.family = family;
        this.weightOutIn = weightOutIn;
        this.dOut = dOut;
        this.dIn = dIn;
        this.method = method;
    }

    /** The target of a bundle: its edit module, layer, family, layout (edit.weight_out_in), dims. */
    public static EditTarget of(Manifest m) {
        return new EditTarget(m.editModule, m.editLayer, m.modelFamily, m.edit.weightOutIn,
            m.dOut(), m.dIn(), METHOD);
    }
}
