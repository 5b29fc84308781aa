"""Merge ``tools/delta_compare.py`` outputs run request by request (``--cases``, one process per
chunk so each lands as it finishes) into one JSON + PNG, and print the per-request table::

    python tools/probes/merge_compare.py runs/pair/*.json --out results/probes/pair.json

The inputs must have the same rows (labels and specs), model and layer; requests are kept in the
order given, a repeated case id is refused.
"""
import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))


def merge(docs: list[dict]) -> dict:
    """One delta_compare result from several with the same model, layer and rows."""
    from tools.delta_compare import summary

    head = docs[0]
    records, seen = [], set()
    for d in docs:
        if (d["model"], d["layer"], d["rows"]) != (head["model"], head["layer"], head["rows"]):
            raise SystemExit("inputs differ in model, layer or rows: merge only chunks of one run")
        for r in d["requests"]:
            if r["case_id"] in seen:
                raise SystemExit(f"case {r['case_id']} appears twice")
            seen.add(r["case_id"])
            records.append(r)
    return {"model": head["model"], "layer": head["layer"], "rows": head["rows"],
            "summary": summary(records), "requests": records}


def table(res: dict) -> str:
    """Per request and row: paraphrase NLL, plain NLL (written at s=1), evaluations; cosines."""
    labels = list(res["rows"])
    lines = ["case | " + " | ".join(f"{lab} para/plain/evals" for lab in labels) + " | cosines"]
    for r in res["requests"]:
        cells = [f"{r['rows'][lab]['ray']['1']['paraphrase']:.2f} / {r['rows'][lab]['ray']['1']['plain']:.2f}"
                 f" / {r['rows'][lab]['loss_evals']}" for lab in labels]
        cos = " ".join(f"{k} {v:.2f}" for k, v in r["cosine"].items())
        lines.append(f"{r['case_id']} | " + " | ".join(cells) + f" | {cos}")
    means = [sum(r["rows"][lab]["ray"]["1"]["paraphrase"] for r in res["requests"]) / len(res["requests"])
             for lab in labels]
    lines.append("mean paraphrase NLL | " + " | ".join(f"{m:.2f}" for m in means))
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("inputs", nargs="+")
    p.add_argument("--out", required=True)
    args = p.parse_args()
    from mobiedit.atomic import atomic_write_text
    from tools.delta_compare import plot

    res = merge([json.loads(Path(f).read_text()) for f in args.inputs])
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(out, json.dumps(res, indent=1))
    plot(res["requests"], out.with_suffix(".png"))
    print(table(res))
    print(json.dumps(res["summary"], indent=1))
    print(f"wrote {out} and {out.with_suffix('.png')}")


if __name__ == "__main__":
    main()
