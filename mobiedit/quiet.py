"""Keep third-party runtime chatter out of the user's terminal: offline mode for the Hub, and
torchao / torch / transformers loggers, warnings and progress bars turned down. Called once by
each entry point (the CLI, the demo, the benches and harnesses), never at import. And the entry
points' own log set-up (:func:`cli_logging`): progress notices (:data:`NOTICE`) as plain lines."""
from __future__ import annotations

import logging
import os
import warnings

#: "torch.onnx" itself is re-levelled by torch's logging set-up at import; its registration child
#: (the "torchvision is not installed. Skipping torchvision::nms" lines of every ONNX export) is not
CHATTY_LOGGERS = ("torchao", "torch._dynamo", "torch.utils._pytree", "torch.onnx",
                  "torch.onnx._internal.exporter._registration", "transformers",
                  "onnxruntime.quantization",  # the nbits quantizer's per-node INFO lines
                  "onnx_ir", "onnxscript")  # the ONNX exporter's optimizer passes


class _QuietQuantizer(logging.Filter):
    """Drops the advice ONNX Runtime's quantizer logs on the root logger below ERROR ("Please
    consider to run pre-processing before quantization", "Automatically update the model to opset
    21"): they are addressed to whoever writes the quantization call, which is this package."""

    MARK = os.path.join("onnxruntime", "quantization")

    def filter(self, record: logging.LogRecord) -> bool:
        return record.levelno >= logging.ERROR or self.MARK not in (record.pathname or "")


def quiet_libraries() -> None:
    """Silence the libraries' start-up and progress output (idempotent)."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    warnings.filterwarnings("ignore")
    for name in CHATTY_LOGGERS:
        logging.getLogger(name).setLevel(logging.ERROR)
    root = logging.getLogger()
    if not any(isinstance(f, _QuietQuantizer) for f in root.filters):
        root.addFilter(_QuietQuantizer())
    try:
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()
        hf_logging.set_verbosity_error()
    except ImportError:
        pass


#: a progress notice: what a person running a long command wants to see (a bench row or a tune
#: candidate starting, a run resumed), not a problem. Entry points show it as a plain line
#: (:func:`cli_logging`); library code logs it with ``log.log(NOTICE, ...)``.
NOTICE = 25


class _CliFormatter(logging.Formatter):
    """Notices as the bare message; warnings and worse (and debug lines) as ``LEVEL name: message``."""

    def format(self, record: logging.LogRecord) -> str:
        if NOTICE <= record.levelno < logging.WARNING:
            return record.getMessage()
        return super().format(record)


class _BarSafeHandler(logging.StreamHandler):
    """Writes each line through ``tqdm.write``: a progress bar on the same stream is cleared first
    and redrawn after, so a log line never lands in the middle of a bar."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            from tqdm import tqdm

            tqdm.write(self.format(record), file=self.stream)
        except Exception:  # noqa: BLE001 — logging's own contract: report, never raise
            self.handleError(record)


def cli_logging(verbose: bool = False) -> None:
    """An entry point's log set-up on stderr: notices and worse (``verbose``: everything, debug
    included); notices without a level name, so normal progress never reads as a warning; each line
    clear of the progress bars."""
    handler = _BarSafeHandler()
    handler.setFormatter(_CliFormatter("%(levelname)s %(name)s: %(message)s"))
    logging.basicConfig(level=logging.DEBUG if verbose else NOTICE, handlers=[handler])
