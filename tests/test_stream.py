"""Layers ≤ l paged out (mobiedit.forward.stream): their file-backed pages leave the resident set
after each use, nothing about the arithmetic changes, and in-memory weights are left alone."""
from __future__ import annotations

import dataclasses
import mmap
import struct

import torch

from mobiedit.families import get_module
from mobiedit.forward.quant import QuantConfig, quantized_copy
from mobiedit.forward.quant_save import save_quantized
from mobiedit.forward.stream import layers_paged_out
from mobiedit.methods.mobiedit import MobiEditConfig
from mobiedit.models import load_model
from mobiedit.requests import EditRequest
from mobiedit.editing.config import ContextConfig
from mobiedit.rss import file_backed_ranges
from mobiedit.zo import ZOConfig

REQ = EditRequest(case_id="s1", prompt="{} professionally plays the sport", subject="David Robinson",
                  target_new="baseball", target_true="basketball")
LAYER = 1  # layers 0 and 1 page out; layer 2 is what the loop runs


def _present(ranges) -> int:
    """Pages of ``ranges`` present in this process's page table (``/proc/self/pagemap`` bit 63)."""
    n, page = 0, mmap.PAGESIZE
    with open("/proc/self/pagemap", "rb") as f:
        for lo, hi in ranges:
            f.seek(lo // page * 8)
            for (entry,) in struct.iter_unpack("<Q", f.read((hi - lo) // page * 8)):
                n += entry >> 63
    return n


def _lower_params(model, family):
    return [p for i in range(LAYER + 1) for p in get_module(model, family.layer, i).parameters()]


def test_lower_layers_leave_the_resident_set_and_compute_the_same(tiny_llama_dir, tmp_path):
    lm = load_model(save_quantized(tiny_llama_dir, tmp_path / "q", LAYER, QuantConfig("w8a16")))
    ids = torch.tensor([[3, 5, 7, 9, 11, 13]])
    with torch.no_grad():
        ref = lm.model(input_ids=ids).logits  # every page touched
    ranges = file_backed_ranges(_lower_params(lm.model, lm.family))
    assert ranges and _present(ranges) > 0
    upper = file_backed_ranges(get_module(lm.model, lm.family.layer, LAYER + 1).parameters())
    with layers_paged_out(lm.model, lm.family, LAYER) as covered:
        assert covered == sum(hi - lo for lo, hi in ranges)
        assert _present(ranges) == 0
        with torch.no_grad():
            got = lm.model(input_ids=ids).logits  # the lower layers fault back in, run, leave again
        assert torch.equal(got, ref)
        assert _present(ranges) == 0 and _present(upper) > 0  # the layers the loop runs stay
    with torch.no_grad():
        lm.model(input_ids=ids)
    assert _present(ranges) > 0  # hooks removed on exit


def test_in_memory_weights_are_never_paged_out(tiny_llama_dir):
    lm = load_model(tiny_llama_dir)
    q = quantized_copy(lm.model, lm.family, LAYER, QuantConfig("w8a16"))
    assert file_backed_ranges(_lower_params(q, lm.family)) == []
    with layers_paged_out(q, lm.family, LAYER) as covered:
        assert covered == 0
    assert all(not m._forward_hooks for m in q.modules())


def test_an_edit_is_identical_with_and_without_paging(tiny_llama_dir, tmp_path):
    from mobiedit.session import prepare, run_method

    lm = load_model(save_quantized(tiny_llama_dir, tmp_path / "q", LAYER, QuantConfig("w8a16")))
    z = ZOConfig(estimator="fzoo", n_dirs=8, h=0.05, optimizer="adam", lr=0.5, max_steps=4, max_evals=10_000)
    on = MobiEditConfig(layer=LAYER, zo=z, mom2_adjustment=False, context=ContextConfig(lengths=((4, 2),)))
    off = dataclasses.replace(on, page_out_lower=False)
    a = run_method(lm, REQ, on, prepare(lm, on, seed=0))
    b = run_method(lm, REQ, off, prepare(lm, off, seed=0))
    assert torch.equal(a.u, b.u) and torch.equal(a.w, b.w) and a.loss_evals == b.loss_evals
