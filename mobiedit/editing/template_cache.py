"""Context templates, generated once per (model, tokenizer, context config, generator state).

:func:`~mobiedit.editing.context.generate_context_templates` samples ~20 short prefixes one token
at a time (11 s on SmolLM2-135M on one core) — every `mobiedit edit`, bench row and demo paid it
again for the same seed. The templates are a pure function of the weights, the tokenizer files,
the :class:`~mobiedit.editing.config.ContextConfig` and the generator's state, so they are cached
as JSON under the user cache keyed by all four, together with the generator's state *after*
sampling: a cache hit leaves the generator exactly where generating would have (a caller that
draws from it next draws the same numbers). A file that is not what this module writes is
ignored (logged) and replaced.
"""
from __future__ import annotations

import base64
import dataclasses
import hashlib
import json
import logging
from pathlib import Path

import torch

from ..atomic import atomic_write_text
from ..digest import update_with_file
from ..paths import cache_root
from .config import ContextConfig
from .context import generate_context_templates
from .stats import weights_digest

log = logging.getLogger(__name__)

#: the non-weight files of a model folder that decide how text is tokenized and decoded
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model", "vocab.json", "merges.txt",
                   "special_tokens_map.json", "added_tokens.json")
FORMAT = 1


def _rng_bytes(generator: torch.Generator) -> bytes:
    return generator.get_state().numpy().tobytes()


def templates_path(model_dir: Path, context: ContextConfig, generator: torch.Generator) -> Path | None:
    """Cache file for these templates; None for a folder without safetensors weights (no identity)."""
    model_dir = Path(model_dir)
    if not any(model_dir.glob("*.safetensors")):
        return None
    h = hashlib.sha256(json.dumps(dataclasses.asdict(context), sort_keys=True).encode())
    h.update(_rng_bytes(generator))
    for name in TOKENIZER_FILES:
        if (p := model_dir / name).is_file():
            h.update(name.encode())
            update_with_file(h, p)
    return cache_root() / "templates" / f"{weights_digest(model_dir)}_{h.hexdigest()[:16]}.json"


def cached_entries(model_dir: str | Path) -> list[Path]:
    """Every cached template list of the weights in ``model_dir`` (any config, seed or tokenizer)."""
    return sorted((cache_root() / "templates").glob(f"{weights_digest(Path(model_dir))}_*.json"))


def _read(path: Path, context: ContextConfig) -> tuple[list[str], bytes] | None:
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
        templates, state = doc["templates"], base64.b64decode(doc["rng_after"], validate=True)
        ok = (doc.get("format") == FORMAT and isinstance(templates, list)
              and len(templates) == 1 + sum(count for _, count in context.lengths)
              and all(isinstance(t, str) and t.endswith("{}") for t in templates) and templates[0] == "{}")
    except (OSError, ValueError, KeyError, TypeError) as exc:
        log.warning("context template cache %s unreadable (%s); generating", path, exc)
        return None
    if not ok:
        log.warning("context template cache %s is not a template list of this config; generating", path)
        return None
    return templates, state


def cached_context_templates(model, tok, context: ContextConfig, generator: torch.Generator,
                             model_dir: str | Path) -> list[str]:
    """:func:`generate_context_templates`, read from / written to the cache; ``generator`` ends in
    the same state either way."""
    path = templates_path(Path(model_dir), context, generator)
    if path is not None and path.is_file() and (got := _read(path, context)) is not None:
        templates, state = got
        try:
            generator.set_state(torch.frombuffer(bytearray(state), dtype=torch.uint8))
        except RuntimeError as exc:  # a state of another generator type: regenerate
            log.warning("context template cache %s: generator state unusable (%s); generating", path, exc)
        else:
            return templates
    templates = generate_context_templates(model, tok, context, generator)
    if path is not None:
        doc = {"format": FORMAT, "templates": templates, "rng_after": base64.b64encode(_rng_bytes(generator)).decode()}
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            atomic_write_text(path, json.dumps(doc))
            log.info("context templates cached at %s", path)
        except OSError as exc:  # an unwritable cache costs the next run the generation, not this edit
            log.warning("context templates not cached (%s): %s", path, exc)
    return templates
