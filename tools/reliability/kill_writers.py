"""The ``edit`` / ``edit-fallback`` and ``journal`` writers of the SIGKILL harness
(:mod:`~tools.reliability.killtest`): what a writer child runs, and the verifiers that check
the state a killed child left (each verifier runs in a forked child of its own)."""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from .kill_proc import _silence, arm_crash_point, folder_digest

EDIT_LIMIT = 2


def make_tiny_llama(path: str) -> None:
    """A tiny random llama (3 layers, width 64) with a small BPE tokenizer, saved with
    save_pretrained (the same recipe as the tests' ``tiny_llama_dir``)."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from mobiedit.factlm.train import train_tokenizer
    from mobiedit.requests import bundled_path

    torch.set_num_threads(1)
    recs = json.loads(bundled_path("counterfact-edit-1k.json").read_text())[:200]
    tok = train_tokenizer([r["prompt"] + " " + r["ground_truth"] for r in recs] + [r["target_new"] for r in recs], 512)
    torch.manual_seed(0)  # HF initialises from the global generator
    model = LlamaForCausalLM(LlamaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=3,
                                         num_attention_heads=4, num_key_value_heads=2, vocab_size=len(tok),
                                         bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id,
                                         pad_token_id=tok.pad_token_id))
    model.save_pretrained(path, safe_serialization=True)
    tok.save_pretrained(path)


# ----------------------------------------------------------------------------- edit writer

def edit_argv(model: Path, out: Path, requests: Path, offset: int) -> list[str]:
    return ["--quiet", "edit", "--model", str(model), "--requests", str(requests), "--offset", str(offset),
            "--limit", str(EDIT_LIMIT), "--method", "rome", "--layer", "0", "--force", "--seed", "0",
            "--out", str(out)]


def _edit_child(argv: list[str], fallback: bool, crash: tuple | None = None) -> None:
    _silence()
    from mobiedit import atomic

    if fallback:
        atomic._exchange = lambda a, b: False  # force the two-rename path of atomic_dir
    if crash is not None:
        arm_crash_point(*crash)
    from mobiedit.cli import main

    os._exit(main(argv))


SPAWN_CODE = ("import sys\nimport mobiedit.atomic as A\n"
              "if sys.argv[1] == '1':\n    A._exchange = lambda a, b: False\n"
              "from mobiedit.cli import main\nsys.exit(main(sys.argv[2:]))\n")


def param_digests(model_dir: str) -> dict[str, str]:
    """:func:`~mobiedit.journal.tensor_sha256` of every parameter of a model folder."""
    import torch

    from mobiedit.journal import tensor_sha256
    from mobiedit.models import load_model

    torch.set_num_threads(1)
    return {k: tensor_sha256(p) for k, p in load_model(model_dir).model.named_parameters()}


def verify_edit_state(out: str, base: str, base_digest: str, cache: str,
                      base_params: dict[str, str] | None = None) -> dict:
    """Check an ``edit --out`` folder after a kill (runs in a verifier child). ``base_params``:
    :func:`param_digests` of the input model (computed here if None)."""
    import torch
    from safetensors.torch import load_file

    from mobiedit.errors import JournalError, MobiEditError
    from mobiedit.journal import Journal, tensor_sha256
    from mobiedit.models import load_model

    torch.set_num_threads(1)
    problems: list[str] = []
    if folder_digest(base) != base_digest:
        problems.append("the input model folder changed")
    for p in sorted((Path(cache) / "stats").glob("*.safetensors")):
        try:
            if not torch.isfinite(load_file(p)["mom2"]).all():
                problems.append(f"cached statistics {p.name} are non-finite")
        except Exception as e:  # noqa: BLE001 - any failure is a torn cache file
            problems.append(f"cached statistics {p.name} do not load: {type(e).__name__}: {e}")
    outp = Path(out)
    aside = outp.parent / f".{outp.name}.old"
    recovered = not outp.exists() and aside.exists()
    if not outp.exists() and not aside.exists():
        return {"state": None, "files": [], "problems": problems, "recovered": False}
    try:
        lm = load_model(outp)  # puts an aside folder back (reader-side recovery)
        if not (outp / "journal" / "journal.jsonl").is_file():
            raise JournalError("incomplete: no journal/journal.jsonl", where=str(outp))
        journal = Journal.open(outp / "journal")
        base_params = base_params or param_digests(base)
        modules = {e.module for e in journal.entries()}
        for module in sorted(modules):
            if not torch.equal(lm.model.get_submodule(module).weight, journal.rebuild(module)):
                problems.append(f"{module} differs from the journal's rebuild")
        touched = {m + ".weight" for m in modules}
        for name, p in lm.model.named_parameters():
            if name not in touched and tensor_sha256(p) != base_params.get(name):
                problems.append(f"untouched parameter {name} differs from the input model")
        state = [str(e.request.get("case_id")) for e in journal.entries(active_only=True)]
    except MobiEditError as e:
        problems.append(f"unloadable: {e}")
        state = ["<unloadable>"]
    files = sorted(str(p.relative_to(outp)) for p in outp.rglob("*") if p.is_file())
    return {"state": state, "files": files, "problems": problems, "recovered": recovered}


# ----------------------------------------------------------------------------- journal writer

def journal_plan(k: int, active: list[int]) -> tuple[str, int]:
    """Operation ``k``: ("undo", edit id) every fourth op when something is active, else
    ("record", layer)."""
    if k % 4 == 3 and active:
        return "undo", active[(k * 7919) % len(active)]
    return "record", k % 2


def journal_factors(k: int) -> tuple[Any, Any]:
    import torch

    from .toy import D_IN, D_OUT

    gen = torch.Generator().manual_seed(10_000 + k)
    return torch.randn(D_OUT, generator=gen) * 0.1, torch.randn(D_IN, generator=gen) * 0.1


def journal_step(state: list[list], k: int) -> list[list]:
    """The planned journal state ([id, k, status] rows) after operation ``k``."""
    state = [list(r) for r in state]
    kind, arg = journal_plan(k, [r[0] for r in state if r[2] == "applied"])
    if kind == "record":
        state.append([state[-1][0] + 1 if state else 1, k, "applied"])
    else:
        for r in state:
            if r[0] == arg:
                r[2] = "undone"
    return state


def _journal_child(folder: str, k0: int, notify_fd: int, max_ops: int) -> None:
    _silence()
    import torch

    from mobiedit.families import FAMILIES
    from mobiedit.journal import Journal, apply_factors
    from .toy import JOURNAL_MODULES, toy_llama

    torch.set_num_threads(1)
    fam = FAMILIES["llama"]
    j = Journal.open(folder)
    model = toy_llama()
    if j.entries():
        j.bake(model, fam)
    for k in range(k0, k0 + max_ops):
        kind, arg = journal_plan(k, [e.id for e in j.entries(active_only=True)])
        if kind == "record":
            module = JOURNAL_MODULES[arg]
            weight = model.get_submodule(module).weight
            u, w = journal_factors(k)
            j.record({"k": k}, "killtest", fam, arg, module, u, w, weight.detach().clone())
            with torch.no_grad():
                weight.copy_(apply_factors(weight, u, w, True))
        else:
            j.undo(arg, model, fam)
        os.write(notify_fd, b".")
    os._exit(0)


def verify_journal_state(folder: str) -> dict:
    """Open a journal after a kill and rebuild every module from the planned factors."""
    import torch

    from mobiedit.errors import MobiEditError
    from mobiedit.journal import Journal, apply_factors
    from .toy import JOURNAL_MODULES, toy_llama

    torch.set_num_threads(1)
    problems: list[str] = []
    if not Path(folder).exists():
        return {"state": [], "problems": problems}
    try:
        j = Journal.open(folder)
        rows = [[e.id, e.request.get("k"), e.status] for e in j.entries()]
        base = toy_llama()
        for module in JOURNAL_MODULES:
            expect = base.get_submodule(module).weight.detach().clone()
            mine = [e for e in j.entries() if e.module == module]
            for e in mine:
                u, w = j.load_factors(e)
                pu, pw = journal_factors(e.request["k"])
                if not (torch.equal(u, pu) and torch.equal(w, pw)):
                    problems.append(f"edit {e.id}: stored factors differ from the planned ones")
                if e.active:
                    expect = apply_factors(expect, pu, pw, True)
            if mine and not torch.equal(j.rebuild(module), expect):
                problems.append(f"{module}: rebuild differs from base + planned active edits")
    except MobiEditError as e:
        problems.append(f"unloadable: {e}")
        rows = [["<unloadable>"]]
    return {"state": rows, "problems": problems}

