"""Keep third-party runtime chatter out of the user's terminal: offline mode for the Hub, and
torchao / torch / transformers loggers, warnings and progress bars turned down. Called once by
each entry point (the CLI, the demo, the benches and harnesses), never at import."""
from __future__ import annotations

import logging
import os
import warnings

CHATTY_LOGGERS = ("torchao", "torch._dynamo", "torch.utils._pytree", "transformers")


def quiet_libraries() -> None:
    """Silence the libraries' start-up and progress output (idempotent)."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    warnings.filterwarnings("ignore")
    for name in CHATTY_LOGGERS:
        logging.getLogger(name).setLevel(logging.ERROR)
    try:
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()
        hf_logging.set_verbosity_error()
    except ImportError:
        pass
