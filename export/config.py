"""Export configuration: one frozen dataclass per concern, nested in :class:`ExportConfig`.

Every dataclass validates itself in ``__post_init__`` and raises :class:`ConfigError` naming the
field (``where="ExportConfig.<section>.<field>"``) and the fix, so a constructed config is always
exportable. Cross-section rules (scheme vs runtime) are checked by :class:`ExportConfig`.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field

from mobiedit.errors import ConfigError
from mobiedit.editing.config import ContextConfig, ObjectiveConfig, check_edited_weight, check_rows_ridge
from mobiedit.recipes import bundle_recipe

RUNTIMES = ("executorch", "onnxruntime")
#: quantization scheme -> runtimes that can lower it
SCHEMES = {"fp32": RUNTIMES, "8da8w": ("executorch",), "8da4w": ("executorch",),
           "qdq_a16w8": ("onnxruntime",)}
EXTENSIONS = {"executorch": "pte", "onnxruntime": "onnx"}
#: edit-side (prefix + edit programs) schemes; "auto" picks the shipped one for the inference scheme
EDIT_SCHEMES = ("auto", "fp32", "w8", "delta", "same", "nbits")
NBITS_COMPUTE = {"fp32": 0, "int8": 4}  # QuantizeConfig.nbits_compute -> MatMulNBits accuracy_level
_AUTO_EDIT = {"fp32": "fp32", "8da8w": "delta", "8da4w": "w8", "qdq_a16w8": "qdq_a16w8"}


def _int(section: str, name: str, value: object, lo: int, hi: int = 1 << 30) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
        raise ConfigError(f"must be an int in [{lo}, {hi}], got {value!r}",
                          where=f"ExportConfig.{section}.{name}", fix=f"set {name} within [{lo}, {hi}]")


@dataclass(frozen=True)
class InferenceShapes:
    """Static shapes of the inference programs.

    max_seq_len: KV-cache positions T (prompt + generated tokens must fit).
    prefill_chunk: tokens C per prefill call (the last chunk of a prompt is padded).
    slots: rank-one slots (edits that can be active without re-export).
    """

    max_seq_len: int = 128
    prefill_chunk: int = 16
    slots: int = 8

    def __post_init__(self) -> None:
        _int("inference", "max_seq_len", self.max_seq_len, 2)
        _int("inference", "prefill_chunk", self.prefill_chunk, 1, self.max_seq_len)
        _int("inference", "slots", self.slots, 1, 4096)


@dataclass(frozen=True)
class EditShapes:
    """Padded sizes of the edit and prefix programs (one program serves every edit that fits).

    K: deltas per edit-program call (= the ZO estimator's rows per step, e.g. fzoo n_dirs+1).
    rows: prompt rows (context templates + KL prompts). suffix: S, tokens from the subject's last
    token to the row end. prefix: P, positions before the latest subject. targets: target read-outs
    (sum over rewrite rows of the target length). kl: KL read-outs (one per KL prompt).
    tokens: prompt length of the prefix program, always prefix + suffix.
    """

    K: int = 17
    rows: int = 22
    suffix: int = 16
    prefix: int = 32
    targets: int = 128
    kl: int = 1

    def __post_init__(self) -> None:
        for name, lo in (("K", 1), ("rows", 2), ("suffix", 1), ("prefix", 1), ("targets", 1), ("kl", 1)):
            _int("edit_shapes", name, getattr(self, name), lo)
        if self.kl >= self.rows:
            raise ConfigError(f"kl ({self.kl}) must be < rows ({self.rows})", where="ExportConfig.edit_shapes.kl",
                              fix="leave rows for the rewrite prompts")

    @property
    def tokens(self) -> int:
        return self.prefix + self.suffix


@dataclass(frozen=True)
class QuantizeConfig:
    """How the programs are quantized.

    scheme: the inference programs' (prefill / decode) scheme: ``fp32``; ``8da8w`` / ``8da4w``
    (ExecuTorch: torchao int8 dynamic per-token activations, int8 per-channel / int4 per-group
    weights, lowered to XNNPACK); ``qdq_a16w8`` (ONNX Runtime: static QDQ, uint16 activations,
    int8 per-channel weights, on ``qdq_ops`` only; every program).
    edit_scheme: the edit program's scheme (and the prefix program's, except for ``delta``).
    Plain per-token int8 activations (``same``) round away the ZO perturbations (loss correlation
    0.04–0.75 with fp32 on the fact LM). ``delta``: the inference model's own 8da weights, each
    linear after the edit layer quantizing the *change* from a δ = 0 row group in two int8 passes
    (:class:`~mobiedit.export.quantize.DeltaLinear`; 0.9999 with 8da8w), prefix on the inference
    model — one weight copy. ``w8``: a second copy with int8 weights and float activations
    (0.9999). ``auto`` = the shipped choice: fp32 → fp32, 8da8w → delta, 8da4w → w8 (int4 weights
    bend the loss surface: delta reaches only 0.97–0.99), qdq_a16w8 → QDQ. ``nbits`` (ONNX Runtime
    only): the prefix and edit programs' constant-weight MatMuls as ONNX Runtime's ``MatMulNBits``
    with ``nbits``-bit weights in blocks of ``group_size`` (the embedding int8 rows with
    ``quantize_embedding``), fp32 activations (:mod:`mobiedit.export.onnx_nbits`): the weights stay packed
    in memory, the lean host of the edit loop.
    group_size: weight group of 8da4w and block of ``nbits``. nbits: 4 or 8. nbits_head: the LM
    head's bits under ``nbits`` (0: ``nbits``). nbits_compute: what ``MatMulNBits`` multiplies in —
    ``fp32`` (the default: weights unpacked to float per block) or ``int8`` (ONNX Runtime's accuracy
    level 4: activations rounded per block to int8, integer dot products). int8 runs int8 weights
    at fp32's speed on this CPU (fp32 compute on them is 1.6–18x slower) but rounds away the search's
    signal: SmolLM2's int8 edit program correlates −0.23 (mean) with fp32 under it, 0.9997 under
    fp32 compute (docs/results.md) — kept to measure with, not for edit programs.
    quantize_lm_head / quantize_embedding: also quantize the
    inference programs' LM head (a float island by default) / token embedding (int8 rows).
    qdq_ops: ONNX op types that get QDQ nodes; qdq_activation_matmuls: also QDQ MatMuls of two
    activations (attention). calibration_batches: calibration feeds per program for static QDQ.
    check_draws: ZO-like delta draws of the export-time correlation check (0 skips it).
    """

    scheme: str = "fp32"
    edit_scheme: str = "auto"
    group_size: int = 32
    nbits: int = 4
    nbits_head: int = 0
    nbits_compute: str = "fp32"
    quantize_lm_head: bool = False
    quantize_embedding: bool = False
    qdq_ops: tuple[str, ...] = ("MatMul", "Gemm")
    qdq_activation_matmuls: bool = True
    calibration_batches: int = 4
    check_draws: int = 4

    def __post_init__(self) -> None:
        if self.scheme not in SCHEMES:
            raise ConfigError(f"unknown scheme {self.scheme!r}", where="ExportConfig.quant.scheme",
                              fix=f"use one of {sorted(SCHEMES)}")
        if self.edit_scheme not in EDIT_SCHEMES:
            raise ConfigError(f"unknown edit scheme {self.edit_scheme!r}", where="ExportConfig.quant.edit_scheme",
                              fix=f"use one of {EDIT_SCHEMES}")
        _int("quant", "group_size", self.group_size, 1)
        for name, ok in (("nbits", (4, 8)), ("nbits_head", (0, 4, 8))):
            if getattr(self, name) not in ok:
                raise ConfigError(f"must be one of {ok}, got {getattr(self, name)!r}", where=f"ExportConfig.quant.{name}",
                                  fix="use 4 (int4 weights) or 8 (int8 weights)" + (", 0: as nbits" if 0 in ok else ""))
        if self.nbits_compute not in NBITS_COMPUTE:
            raise ConfigError(f"unknown nbits compute {self.nbits_compute!r}", where="ExportConfig.quant.nbits_compute",
                              fix=f"use one of {tuple(NBITS_COMPUTE)}")
        if self.edit_scheme == "nbits" and (self.group_size < 16 or self.group_size & (self.group_size - 1)):
            raise ConfigError(f"the nbits block must be a power of two >= 16, got {self.group_size}",
                              where="ExportConfig.quant.group_size", fix="use 32 (or 16, 64, 128)")
        _int("quant", "calibration_batches", self.calibration_batches, 1, 1000)
        _int("quant", "check_draws", self.check_draws, 0, 4)
        if isinstance(self.qdq_ops, list):
            object.__setattr__(self, "qdq_ops", tuple(self.qdq_ops))
        if not self.qdq_ops or not all(isinstance(o, str) and o for o in self.qdq_ops):
            raise ConfigError("must be a non-empty list of ONNX op types", where="ExportConfig.quant.qdq_ops",
                              fix="e.g. ['MatMul', 'Gemm']")

    @property
    def quantized(self) -> bool:
        return self.scheme != "fp32"

    @property
    def resolved_edit_scheme(self) -> str:
        """The edit side's scheme with ``auto`` / ``same`` resolved."""
        if self.edit_scheme == "auto":
            return _AUTO_EDIT[self.scheme]
        return self.scheme if self.edit_scheme == "same" else self.edit_scheme


@dataclass(frozen=True)
class LowerConfig:
    """Where the programs go. runtime: ``executorch`` (.pte, XNNPACK) or ``onnxruntime`` (.onnx).
    opset: ONNX opset. lint: run :mod:`mobiedit.export.lint` and refuse programs it rejects."""

    runtime: str = "executorch"
    opset: int = 18
    lint: bool = True

    def __post_init__(self) -> None:
        if self.runtime not in RUNTIMES:
            raise ConfigError(f"unknown runtime {self.runtime!r}", where="ExportConfig.lower.runtime",
                              fix=f"use one of {RUNTIMES}")
        _int("lower", "opset", self.opset, 17, 23)

    @property
    def ext(self) -> str:
        return EXTENSIONS[self.runtime]


@dataclass(frozen=True)
class EditSetup:
    """What the bundle needs to edit on the phone: the edit layer, the context templates (generated
    once at export with ``context``, ``seed``), the objective and the key statistics.

    layer: edit layer (None: the model profile ``mobiedit.json`` or an error). mom2: ship C⁻¹ of the
    layer's keys (False: identity, ROME's mom2_adjustment=False). ridge: relative ridge of C.
    stats_limit: use at most this many texts of the statistics corpus (0 = all).
    recipe: the search the bundle's hosts run, a name of :data:`mobiedit.recipes.BUNDLE_RECIPES`
    (``fzoo``, the shipped one; ``fzoo-lr2``: Adam lr 2; ``fzoo-grad``: coordinate directions sized by
    the whole gradient).
    update_rule: the write every host computes (manifest ``edit.update``): ``rome`` (``C⁻¹k̄``),
    ``rows`` (exact at every rewrite row's key, ``update.rule: rows`` of the eager path, with
    ``rows_ridge``), or ``protect`` (the default since session 34) / ``rows-protect`` — those two with
    the active journal edits' keys held still (``C + edited_weight · K_pᵀK_p`` for ``C``; each bundle
    edit's key is journaled with it).
    """

    layer: int | None = None
    context: ContextConfig = field(default_factory=ContextConfig)
    objective: ObjectiveConfig = field(default_factory=ObjectiveConfig)
    seed: int = 0
    mom2: bool = True
    ridge: float = 1e-4
    stats_limit: int = 0
    recipe: str = "fzoo"
    update_rule: str = "protect"  # session 34: the bundle's 50-edit run (docs/reliability.md)
    rows_ridge: float = 1e-2
    edited_weight: float = 1.0

    def __post_init__(self) -> None:
        from mobiedit.editing.update import BUNDLE_UPDATE_RULES

        if self.update_rule not in BUNDLE_UPDATE_RULES:
            raise ConfigError(f"unknown update rule {str(self.update_rule)[:40]!r}", where="ExportConfig.edit.update_rule",
                              fix=f"use one of {', '.join(BUNDLE_UPDATE_RULES)} (the eager path's nullspace "
                                  "needs a projector a bundle does not ship)")
        check_rows_ridge(self.rows_ridge, "ExportConfig.edit.rows_ridge")
        check_edited_weight(self.edited_weight, "ExportConfig.edit.edited_weight")
        if self.layer is not None:
            _int("edit", "layer", self.layer, 0)
        _int("edit", "stats_limit", self.stats_limit, 0)
        _int("edit", "seed", self.seed, 0, 2**63 - 1)
        bundle_recipe(self.recipe, "ExportConfig.edit.recipe")
        if not (isinstance(self.ridge, (int, float)) and 0 <= self.ridge < 1):
            raise ConfigError(f"must be in [0, 1), got {self.ridge!r}", where="ExportConfig.edit.ridge",
                              fix="use ROME's 1e-4")


@dataclass(frozen=True)
class ExportConfig:
    """Everything :func:`mobiedit.export.export_bundle` needs, one section per concern."""

    inference: InferenceShapes = field(default_factory=InferenceShapes)
    edit_shapes: EditShapes = field(default_factory=EditShapes)
    quant: QuantizeConfig = field(default_factory=QuantizeConfig)
    lower: LowerConfig = field(default_factory=LowerConfig)
    edit: EditSetup = field(default_factory=EditSetup)

    def __post_init__(self) -> None:
        for name, kind in (("inference", InferenceShapes), ("edit_shapes", EditShapes),
                           ("quant", QuantizeConfig), ("lower", LowerConfig), ("edit", EditSetup)):
            if not isinstance(getattr(self, name), kind):
                raise ConfigError(f"must be a {kind.__name__}, got {type(getattr(self, name)).__name__}",
                                  where=f"ExportConfig.{name}", fix=f"build it with {kind.__name__}(...)")
        edit = self.quant.resolved_edit_scheme
        if edit in ("qdq_a16w8", "nbits") and self.lower.runtime != "onnxruntime" or edit in ("8da8w", "8da4w") and \
                self.lower.runtime != "executorch":
            raise ConfigError(f"edit scheme {edit!r} cannot be lowered to {self.lower.runtime!r}",
                              where="ExportConfig.quant.edit_scheme",
                              fix="use 'auto'" + (" or runtime onnxruntime" if edit == "nbits" else ""))
        if self.edit_shapes.rows < self.edit_shapes.kl + 1:
            raise ConfigError("no row left for rewrite prompts", where="ExportConfig.edit_shapes.rows",
                              fix="rows = context templates + KL prompts")
        if self.lower.runtime not in SCHEMES[self.quant.scheme]:
            raise ConfigError(f"scheme {self.quant.scheme!r} cannot be lowered to {self.lower.runtime!r}",
                              where="ExportConfig.quant.scheme",
                              fix=f"use one of {[s for s, r in SCHEMES.items() if self.lower.runtime in r]} "
                                  f"with runtime {self.lower.runtime!r}")

    def as_dict(self) -> dict:
        return asdict(self)


DEFAULT_SCHEME = {"executorch": "8da8w", "onnxruntime": "qdq_a16w8"}  # the shipped program scheme per runtime


def default_export_config(runtime: str = "executorch") -> ExportConfig:
    """The shipped export configuration for ``runtime``: every section at its defaults, the
    runtime's default quantization scheme (:data:`DEFAULT_SCHEME`). ``mobiedit export``'s flags
    are merged over it (:func:`mobiedit.config_io.merge`)."""
    if runtime not in DEFAULT_SCHEME:
        raise ConfigError(f"unknown runtime {runtime!r}", where="lower.runtime", fix=f"use one of {sorted(DEFAULT_SCHEME)}")
    return ExportConfig(quant=QuantizeConfig(scheme=DEFAULT_SCHEME[runtime]), lower=LowerConfig(runtime=runtime))

