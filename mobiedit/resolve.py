"""What every command resolves from its arguments — the model folder, the edit layer, the
method's config, the edit requests — shared by the CLI, the demo, the benches and the export
tools, so that none of them imports the CLI."""
from __future__ import annotations

import dataclasses
from pathlib import Path

from .errors import ConfigError


def resolve_model(args) -> Path:
    """``--model DIR|NAME`` or ``--preset NAME`` (the fact LM, trained and cached on first use)."""
    if getattr(args, "model", None):
        from .checkpoints import resolve_model_arg

        return resolve_model_arg(args.model)
    from .factlm import ensure_fact_lm

    return ensure_fact_lm(args.preset, progress=not args.quiet)


def edit_layer_for(model_dir: Path, override: int | None) -> int:
    """The edit layer: ``--layer``, else the model profile's (``mobiedit.json``), else an error."""
    from .profile import resolve_layer

    return resolve_layer(model_dir, override)


def method_config(method: str, layer: int, config_path: str | None, seed: int):
    """The method's dataclass config: YAML file (if any) with ``layer`` and seed applied."""
    from .config_io import load_yaml
    from .methods.zo_edit import MobiEditConfig
    from .rome.config import ROMEConfig

    cls = {"rome": ROMEConfig, "mobiedit": MobiEditConfig}[method]
    cfg = load_yaml(cls, config_path) if config_path else cls()
    cfg = dataclasses.replace(cfg, layer=layer)
    if method == "mobiedit":
        cfg = dataclasses.replace(cfg, zo=dataclasses.replace(cfg.zo, seed=seed))
    return cfg


def load_cli_requests(args):
    """``--requests FILE`` or one ad-hoc ``--subject/--prompt/--target`` request, sliced by
    ``--offset`` / ``--limit``."""
    from .requests import load_requests, requests_from_cli

    if args.requests:
        reqs = load_requests(args.requests)
    elif args.subject and args.prompt and args.target:
        reqs = requests_from_cli(args.subject, args.prompt, args.target, getattr(args, "target_true", None))
    else:
        raise ConfigError("no edit requests given", where="--requests",
                          fix="pass --requests FILE, or --subject S --prompt P --target T")
    return reqs[args.offset: args.offset + args.limit] if args.limit else reqs[args.offset:]
