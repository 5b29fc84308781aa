"""Shared pieces of the journal tests (test_journal*.py): tiny models of two families, random
rank-one factors, an edit as a method makes it, and a journal of four edits."""
from __future__ import annotations

from pathlib import Path

import torch
from transformers import GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM

from mobiedit.families import FAMILIES, Family, edit_weight
from mobiedit.journal import Journal, apply_factors
from mobiedit.requests import requests_from_cli

LLAMA, GPT2 = FAMILIES["llama"], FAMILIES["gpt2"]
REQ = requests_from_cli("Ann", "{} likes", "tea", "coffee")[0]


def tiny_llama(seed: int = 0) -> LlamaForCausalLM:
    cfg = LlamaConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                      num_key_value_heads=4, vocab_size=100)
    with torch.random.fork_rng():  # HF init draws from the global generator; keep it unchanged
        torch.manual_seed(seed)
        return LlamaForCausalLM(cfg).eval()


def tiny_gpt2(seed: int = 0) -> GPT2LMHeadModel:
    cfg = GPT2Config(n_embd=32, n_layer=2, n_head=4, vocab_size=100, n_positions=16)
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        return GPT2LMHeadModel(cfg).eval()


def factors(weight: torch.Tensor, out_in: bool, gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    d_out, d_in = weight.shape if out_in else weight.shape[::-1]
    return torch.randn(d_out, generator=gen), torch.randn(d_in, generator=gen) * 0.1


def snapshot(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def same_state(model: torch.nn.Module, state: dict[str, torch.Tensor]) -> bool:
    return all(torch.equal(v, state[k]) for k, v in model.state_dict().items())


def do_edit(j: Journal, model: torch.nn.Module, fam: Family, layer: int, gen: torch.Generator, **kw):
    """What an editing method does: compute factors, record, apply with apply_factors."""
    weight = edit_weight(model, fam, layer)
    u, w = factors(weight, fam.weight_out_in, gen)
    entry = j.record(REQ, "rome", fam, layer, fam.mlp_out.format(layer), u, w, weight.detach().clone(), **kw)
    with torch.no_grad():
        weight.copy_(apply_factors(weight, u, w, fam.weight_out_in))
    return entry, u, w


def edited_journal(folder: Path):
    """A tiny Llama with 4 edits journaled in ``folder``: layer 1, layer 0, layer 1, layer 1 ->
    (journal, model, base state, [(entry, u, w)])."""
    model, gen = tiny_llama(), torch.Generator().manual_seed(123)
    base = snapshot(model)
    j = Journal.open(folder)
    edits = [do_edit(j, model, LLAMA, layer, gen) for layer in (1, 0, 1, 1)]
    return j, model, base, edits
