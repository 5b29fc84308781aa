"""What every command resolves from its arguments — the model folder, the edit layer, the
method's config, the edit requests — shared by the CLI, the demo, the benches and the export
tools, so that none of them imports the CLI.

The plain-argument forms (:func:`model_dir`, :func:`load_method_config`) are the implementation
behind :mod:`mobiedit.api`; the ``args`` forms read an argparse namespace.
"""
from __future__ import annotations

import dataclasses
import logging
import os
from pathlib import Path
from typing import Any, Mapping

from .errors import ConfigError

log = logging.getLogger(__name__)


def model_dir(name_or_dir: str | os.PathLike | None, preset: str = "default", progress: bool = True) -> Path:
    """The local folder of a model: a checkpoint name (``mobiedit model --list``; converted on
    first use), a folder path, or — when ``name_or_dir`` is None — the fact LM ``preset``
    (trained and cached on first use). The folder is not checked here (loading does that)."""
    if name_or_dir:
        from .checkpoints import resolve_model_arg

        return resolve_model_arg(name_or_dir)
    from .factlm import ensure_fact_lm

    return ensure_fact_lm(preset, progress=progress)


MODEL_HELP = "local Hugging Face model folder or checkpoint name (`mobiedit model --list`)"


def add_model_args(sp, preset: bool = True) -> None:
    """The flags :func:`resolve_model` reads, on argparse parser ``sp``: ``--model DIR|NAME``; with
    ``preset``, the alternative ``--preset NAME`` (the fact LM, the default when ``--model`` is
    absent), else ``--model`` is required. Every command that loads a model declares them here."""
    if not preset:
        sp.add_argument("--model", required=True, help=MODEL_HELP)
        return
    g = sp.add_mutually_exclusive_group()
    g.add_argument("--model", help=MODEL_HELP)
    g.add_argument("--preset", default="default", help="fact LM preset when --model is absent (small|default|wide)")


def resolve_model(args) -> Path:
    """``--model DIR|NAME`` or ``--preset NAME`` (the fact LM, trained and cached on first use)."""
    return model_dir(getattr(args, "model", None), getattr(args, "preset", "default"), not args.quiet)


def edit_layer_for(model_dir: Path, override: int | None) -> int:
    """The edit layer: ``--layer``, else the model profile's (``mobiedit.json``), else an error."""
    from .profile import resolve_layer

    return resolve_layer(model_dir, override)


def layer_list(text: str | None, flag: str = "--layers") -> list[int]:
    """``"3,4,5"`` as ``[3, 4, 5]`` (None or empty: ``[]``); a ConfigError naming ``flag`` for
    anything but comma-separated layers >= 0."""
    if not text:
        return []
    try:
        layers = [int(x) for x in text.split(",")]
    except ValueError:
        layers = [-1]
    if any(x < 0 for x in layers):
        raise ConfigError(f"bad layer list {text!r}", where=flag, fix=f"e.g. {flag} 3,4,5 (layers >= 0)")
    return layers


def load_method_config(method: str, config_path: str | os.PathLike | None = None,
                       overrides: Mapping[str, Any] | None = None,
                       model_dir: str | os.PathLike | None = None) -> Any:
    """The config dataclass of ``method`` (:data:`mobiedit.methods.METHODS`): its defaults, the
    settings of ``model_dir``'s profile (:func:`mobiedit.profile.profile_settings`), the YAML file
    ``config_path``, then the mapping ``overrides``, each merged over the last
    (:func:`mobiedit.config_io.merge`: nested mappings change single fields).

    Raises:
        ConfigError: unknown method (``where="method"``), unreadable YAML, unknown keys or
            invalid values (``where`` names the dotted field, or the profile file).
    """
    from .config_io import merge, read_yaml
    from .methods import method_entry
    from .profile import with_profile

    cls, _ = method_entry(method)
    cfg = with_profile(cls(), model_dir, method=method)
    if config_path:
        cfg = merge(cfg, read_yaml(config_path), str(config_path))
    return merge(cfg, dict(overrides)) if overrides else cfg


def check_config_layer(config_path: str | os.PathLike | None, layer: int) -> None:
    """Refuse a YAML config whose ``layer`` is not the run's edit ``layer``: the run's layer
    (``--layer``, else the model profile's) is applied over every config (:func:`run_overrides`),
    and a config's own ``layer`` silently replaced would edit a layer the user did not ask for.

    Raises:
        ConfigError: naming the file's ``layer`` field and both fixes.
    """
    if not config_path:
        return
    from .config_io import read_yaml

    raw = read_yaml(config_path)
    set_layer = raw.get("layer") if isinstance(raw, Mapping) else None
    if set_layer is not None and set_layer != layer:
        raise ConfigError(f"the config sets layer {set_layer!r}, but this run edits layer {layer} "
                          "(from --layer or the model profile)", where=f"{config_path}, field 'layer'",
                          fix=f"pass the layer to the run (--layer {set_layer}; in Python layer={set_layer}) "
                              "and drop 'layer' from the config")


def run_overrides(cfg: Any, layer: int, seed: int) -> dict[str, Any]:
    """The overrides a run applies to a method config: the edit ``layer`` and, for a method with a
    search (a ``zo`` section), its ``seed``."""
    searched = any(f.name == "zo" for f in dataclasses.fields(cfg))
    return {"layer": layer, **({"zo": {"seed": seed}} if searched else {})}


def method_config(method: str, layer: int, config_path: str | None, seed: int,
                  model_dir: str | os.PathLike | None = None):
    """The method's dataclass config: the model profile's settings and the YAML file (if any) over
    the defaults (:func:`load_method_config`), with ``layer`` and seed applied."""
    from .config_io import merge

    check_config_layer(config_path, layer)
    cfg = load_method_config(method, config_path, model_dir=model_dir)
    return merge(cfg, run_overrides(cfg, layer, seed))


def request_file(requests: str | os.PathLike | None, model_dir: str | os.PathLike) -> Path:
    """The request file of a command that edits or scores many requests (``bench``,
    ``sequential``, ``tune``, ``trace``): ``requests`` (``--requests``) when given; else the one
    ``model_dir``'s profile names (its ``requests``: facts that model knows — ``bundled:PATH``
    under ``mobiedit/data``, ``file:NAME`` in the folder); else the bundled CounterFact 1k
    (:data:`mobiedit.profile.DEFAULT_REQUESTS`). Logs the choice when it is not ``requests``.

    Raises:
        ConfigError: the profile names a file that is not there (naming the field and the fix).
    """
    from .profile import DEFAULT_REQUESTS, PROFILE_FILE, read_profile
    from .requests import bundled_path

    if requests:
        return Path(requests)
    prof = read_profile(model_dir)
    source = prof.requests if prof is not None else ""
    if not source:
        return bundled_path(DEFAULT_REQUESTS)
    if source.startswith("file:"):
        path = Path(model_dir) / source[len("file:"):]
    else:
        from importlib import resources

        path = Path(str(resources.files("mobiedit") / "data")) / source[len("bundled:"):]
    if not path.is_file():
        raise ConfigError(f"the request file {source!r} the profile names is not there ({path})",
                          where=f"{Path(model_dir) / PROFILE_FILE}, field 'requests'",
                          fix="pass --requests FILE, or correct or remove the profile's 'requests'")
    log.info("requests: %s (the model profile's; --requests overrides)", path)
    return path


def load_cli_requests(args):
    """``--requests FILE`` or one ad-hoc ``--subject/--prompt/--target`` request, sliced by
    ``--offset`` / ``--limit``."""
    from .requests import load_requests, requests_from_cli

    for flag, value in (("--offset", args.offset), ("--limit", args.limit)):
        if value < 0:
            raise ConfigError(f"{flag} is {value}", where=flag, fix=f"pass {flag} 0 or more")
    one = {f: v for f, v in (("--subject", args.subject), ("--prompt", args.prompt), ("--target", args.target))
           if v is not None}
    if args.requests and one:
        raise ConfigError(f"both --requests and {', '.join(one)} given", where="--requests",
                          fix="pass a request file, or one request as --subject S --prompt P --target T, not both")
    if args.requests:
        reqs = load_requests(args.requests)
    elif one:  # a missing or empty part of the one request is named (RequestError)
        reqs = requests_from_cli(args.subject, args.prompt, args.target, getattr(args, "target_true", None))
    else:
        raise ConfigError("no edit requests given", where="--requests",
                          fix="pass --requests FILE, or --subject S --prompt P --target T")
    picked = reqs[args.offset: args.offset + args.limit] if args.limit else reqs[args.offset:]
    if not picked:
        raise ConfigError(f"--offset {args.offset} is past the last of the {len(reqs)} request(s)", where="--offset",
                          fix=f"pass --offset below {len(reqs)}")
    return picked
