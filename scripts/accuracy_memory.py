#!/usr/bin/env python3
"""Memory accuracy against DLPerf's measured Megatron-LM runs.

Builds one scenario per DLPERF case of published_cases.json, runs
`strata simulate --format json` on it and prints a Markdown table of
predicted against measured GPU memory (docs/accuracy.md holds the latest).

  scripts/accuracy_memory.py [--strata build/app/strata] [--cases ../shared/validation/published_cases.json]
  scripts/accuracy_memory.py --cases validation/dlperf-megatron.json   (DLPerf's whole table)

Settings the source does not state, and how they are chosen here:
- GPU: V100-SXM2-16GB = the v100-32g preset with memory_GiB 16, DGX-1-like
  node of 8 GPUs, 4 nodes as the family's hardware profile says.
- Megatron-LM (2020, commit 8aa4619) on the megatron-lm-2021 stack, as
  validate-published prices the same rows: fp16 with fp32 master weights and
  an fp32 gradient copy (fp32_grad_accumulation), Adam, full recompute
  (--checkpoint-activations), standard attention, dropout, seq 2048, vocab 51200.
- dp, tp, pp, microbatch and global batch from the case.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def scenario(case, family):
    m = {**family.get("model", {}), **case["model"]}
    st = {**family.get("strategy", {}), **case["strategy"]}
    hw = case["hardware"]
    gpus = hw["count"]
    nodes = max(1, gpus // 8)
    return {
        "name": case["id"],
        "model": {"name": case["id"], "layers": m["layers"], "hidden": m["hidden"],
                  "heads": m["heads"], "seq_len": m["seq_len"], "vocab": m["vocab"],
                  "dropout": True},
        "cluster": {"gpu": {"preset": "v100-32g", "name": "v100-16g", "memory_GiB": 16},
                    "gpus_per_node": min(8, gpus), "nodes": nodes},
        "batch": {"global": st["global_batch_seqs"], "micro": st["microbatch"]},
        "plan": {"dp": st["dp"], "tp": st["tp"], "pp": st["pp"], "recompute": "full",
                 "optimizer": "adam", "precision": "fp16",
                 "implementation": {"attention": "standard", "fp32_grad_accumulation": True}},
        # The stack validate-published prices these runs with.
        "stack": "megatron-lm-2021",
    }


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--strata", default=os.path.join(ROOT, "build/app/strata"))
    ap.add_argument("--cases", default=os.path.join(ROOT, "../shared/validation/published_cases.json"))
    args = ap.parse_args()
    data = json.load(open(args.cases))
    family = data["family_notes"]["DLPERF"]["defaults"]
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for case in data["cases"]:
            if case.get("family") != "DLPERF" or "gpu_memory_MiB" not in case.get("measured", {}):
                continue
            path = os.path.join(tmp, case["id"] + ".json")
            json.dump(scenario(case, family), open(path, "w"))
            out = subprocess.run([args.strata, "simulate", path, "--format", "json"],
                                 capture_output=True, text=True)
            if out.returncode != 0:
                sys.exit(out.stderr)
            r = json.loads(out.stdout)
            measured = case["measured"]["gpu_memory_MiB"]
            predicted = r["peak_memory_bytes"] / 2**20
            b = r["memory_breakdown_bytes"]
            rows.append((case["id"], measured, predicted, 100 * (predicted - measured) / measured,
                         b["allocator_reserve"] / 2**20))
    print("| case | measured MiB | predicted MiB | error | of which allocator_reserve MiB |")
    print("|---|---:|---:|---:|---:|")
    for cid, meas, pred, err, res in rows:
        print(f"| {cid} | {meas:.0f} | {pred:.0f} | {err:+.1f} % | {res:.0f} |")
    mean = sum(abs(r[3]) for r in rows) / len(rows)
    print(f"\nmean absolute error: {mean:.1f} % over {len(rows)} cases")


if __name__ == "__main__":
    main()
