"""Issue-18 probe: is the forward-only delta's direction gap the estimator's noise or Adam's geometry?
ROME's own search (``rome-lean``: exact gradients through the prefix graph) run twice per request —
with its Adam, and with normalised gradient descent (``z -= lr·√d·g/‖g‖``, patched in for
``torch.optim.Adam`` around the second search only) — and compared: norm, evaluations, plain and
paraphrase target NLL of the written edit (``tools.delta_compare.ray`` at s = 1), cosine with
Adam's delta. A probe script (it patches the optimizer), not a product path::

    python tools/probes/exact_direction.py smollm2-135m 4 0.5,0.1
"""
import sys
import json, logging, contextlib
from pathlib import Path
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
import torch
torch.set_num_threads(1)
logging.basicConfig(level=logging.WARNING, format="%(message)s")
from tools.delta_compare import ray
from mobiedit.bench_rows import row_config
from mobiedit.checkpoints import resolve_model_arg
from mobiedit.models import load_model
from mobiedit.profile import resolve_layer
from mobiedit.quiet import quiet_libraries
from mobiedit.requests import load_requests
from mobiedit.session import prepare, run_once, forward_model_for
quiet_libraries()

class NormGD(torch.optim.Optimizer):
    def __init__(self, params, lr):
        super().__init__(params, {"lr": lr})
    @torch.no_grad()
    def step(self):
        for g in self.param_groups:
            for p in g["params"]:
                d = p.numel() ** 0.5
                p.add_(p.grad / (p.grad.norm() + 1e-12), alpha=-g["lr"] * d)

@contextlib.contextmanager
def optimizer(cls):
    orig = torch.optim.Adam
    torch.optim.Adam = cls
    try:
        yield
    finally:
        torch.optim.Adam = orig

model = sys.argv[1]; n = int(sys.argv[2]); lrs = [float(x) for x in sys.argv[3].split(",")]
md = Path(resolve_model_arg(model)); layer = resolve_layer(md, None)
reqf = {"smollm2-135m": "mobiedit/data/known/smollm2-135m.json"}[model]
cfg = row_config("rome-lean", layer, 0, (), md); lm = load_model(md); ctx = prepare(lm, cfg, 0)
fw = forward_model_for(lm, cfg)
for req in load_requests(reqf)[:n]:
    rec = {}
    o = run_once(lm, req, cfg, ctx, fw); base = o.delta.double()
    r = ray(lm, ctx, req, cfg, o.delta)["1"]
    rec["adam"] = (round(float(base.norm()), 1), o.loss_evals, o.succeeded, round(r["plain"], 3), round(r["paraphrase"], 3))
    for lr in lrs:
        with optimizer(lambda params, lr=None, _l=lr: NormGD(params, _l)):
            o2 = run_once(lm, req, cfg, ctx, fw)
        dl = o2.delta.double(); r2 = ray(lm, ctx, req, cfg, o2.delta)["1"]
        rec[f"ngd{lr:g}"] = (round(float(dl.norm()), 1), o2.loss_evals, o2.succeeded, round(r2["plain"], 3), round(r2["paraphrase"], 3),
                            "cos", round(float(dl @ base / dl.norm() / base.norm()), 3))
    print(req.case_id, json.dumps(rec), flush=True)
