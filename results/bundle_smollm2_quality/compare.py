"""The SmolLM2 bundle quality rows beside the eager search on the same 10 requests (run from the repo root:
``python results/bundle_smollm2_quality/compare.py``)."""
import json, statistics as st
def load(f):
    return [j for j in map(json.loads, open(f)) if "case_id" in j]
rows = {"eager bf16 (bench log, the shipped search)": load("results/bench_smollm2/row-fzoo-lr2-bf16-2f0a2bdd-L5.jsonl")[:10],
        "bundle QDQ a16w8 edit programs": load("results/bundle_smollm2_quality/qdq_a16w8.jsonl")}
rows["bundle nbits int8 edit programs"] = load("results/bundle_smollm2_quality/nbits_int8.jsonl")
ids = [r["case_id"] for r in rows["bundle QDQ a16w8 edit programs"]]
for name, rs in rows.items():
    d = {r["case_id"]: r for r in rs}
    rs = [d[c] for c in ids if c in d]
    n = len(rs)
    m = lambda k: 100 * sum(r["scores"][k] for r in rs) / n
    said = sum(1 for r in rs if r["succeeded"] and r["scores"]["efficacy_acc"] == 1.0)
    print(f"{name:45} n={n} eff {m('efficacy_acc'):.1f} gen {m('generalization_acc'):.1f} effP {m('efficacy_prob'):.1f} "
          f"genP {m('generalization_prob'):.1f} locU {m('locality_unchanged'):.1f} succ {100*sum(r['succeeded'] for r in rs)/n:.1f} "
          f"evals med {st.median(r['loss_evals'] for r in rs):.0f} s/edit {st.mean(r['wall_s'] for r in rs):.1f} "
          f"succeeded-but-float-model-wrong {sum(1 for r in rs if r['succeeded'] and r['scores']['efficacy_acc'] < 1)}")
