#!/usr/bin/env python3
"""End-to-end checks of `strata tradeoff` (docs/remat.md) on the ResNet-1001
preset (configs/scenarios/chains/resnet1001-chen.json).

Usage: check_tradeoff.py STRATA SCENARIO. Checks the JSON contract, the
shape Chen et al. 2016 report (about 48 GB of activations without savings,
7 GB with sqrt(n) checkpointing for about 30 % more time), that the optimal
solver is never slower than a simple policy at the same budget on this
chain, the SVG chart, and the table and CSV renderings.
"""
import csv
import io
import json
import os
import subprocess
import sys
import tempfile
import time


def run(*args, rc=0):
    p = subprocess.run([STRATA, *args], capture_output=True, text=True)
    if p.returncode != rc:
        sys.exit(f"{' '.join(args)}: exit {p.returncode}, expected {rc}\n{p.stdout[:2000]}\n{p.stderr}")
    return p.stdout


def check(cond, msg):
    if not cond:
        sys.exit("FAILED: " + msg)


STRATA, SCENARIO = sys.argv[1], sys.argv[2]
GiB = 2**30

with tempfile.TemporaryDirectory() as tmp:
    svg = os.path.join(tmp, "t.svg")
    d = json.loads(run("tradeoff", SCENARIO, "--format", "json", "--svg", svg))
    chart = open(svg).read()
check(chart.startswith("<svg") and chart.rstrip().endswith("</svg>"), "the chart is one <svg>")
for policy in ("none", "every_k", "sqrt", "revolve", "optimal"):
    check(f">{policy}<" in chart, f"the chart's legend names {policy}")

check(d["model"] == "resnet1001" and d["stages"] == 335, "335 stages: stem, 333 units, head")
budgets = d["budgets"]
check(len(budgets) == 16, "16 budgets by default")
act = [b["activation_budget_bytes"] for b in budgets]
check(act == sorted(act, reverse=True), "budgets descend")
check(act[0] == d["no_savings"]["activation_bytes"], "the sweep starts at no savings")
for b in budgets:
    check(b["memory_budget_bytes"] == b["activation_budget_bytes"] + d["fixed_bytes"], "memory = fixed + activations")
    p = b["policies"]
    check(set(p) == {"none", "every_k", "sqrt", "revolve", "optimal"}, "five policies")
    check(p["optimal"] is not None, "optimal fits every budget down to the least")
    for name, q in p.items():
        if q is None:
            continue
        check(q["activation_peak_bytes"] <= b["activation_budget_bytes"], f"{name} within its budget")
        check(q["overhead"] >= -1e-12, f"{name}: no schedule beats no savings")
        check(q["step_time_s"] >= p["optimal"]["step_time_s"] - 1e-9,
              f"{name} faster than optimal at {b['activation_budget_bytes']}")
check(budgets[0]["policies"]["none"]["overhead"] == 0, "no savings at the top")
check(all(b["policies"]["none"] is None for b in budgets[1:]), "no savings fits only the top budget")

# Chen et al. 2016: 48 G → 7 G for about 30 % more time (our activations
# include the gradients of feature maps and working buffers).
none_gb = d["no_savings"]["activation_bytes"] / 1e9
check(44 <= none_gb <= 52, f"no savings: {none_gb:.1f} GB of activations (Chen: 48)")
sqrt = budgets[0]["policies"]["sqrt"]
check(5e9 <= sqrt["activation_peak_bytes"] <= 8e9, f"sqrt: {sqrt['activation_peak_bytes'] / 1e9:.1f} GB (Chen: 7)")
check(0.25 <= sqrt["overhead"] <= 0.35, f"sqrt: +{100 * sqrt['overhead']:.1f} % (Chen: about 30 %)")
check(sqrt["setting"] == "k=19", "ceil(sqrt(335)) = 19 stages a segment")

# Table and CSV, on a quick sweep.
table = run("tradeoff", SCENARIO, "--budgets", "3", "--levels", "20")
lines = table.splitlines()
check("optimal" in lines[5] and len(lines) == 7 + 3, "table: summary, header and 3 rows")
rows = list(csv.DictReader(io.StringIO(run("tradeoff", SCENARIO, "--format", "csv", "--budgets", "3", "--levels", "20"))))
check(len(rows) == 3 * 5, "csv: a row per budget and policy")
check({r["feasible"] for r in rows} <= {"true", "false"}, "csv: feasible is a bool")
run("tradeoff", SCENARIO, "--budgets", "1", rc=2)

# The optimal solver grows as stages³ × levels: a 2,000-stage chain at 100
# levels (about 1.9e12 steps, hours) is refused at once, named, exit 2; at
# 2 levels (about 7.7e10) still refused; the same chain's 60 stages run.
def chain(n):
    return {"model": {"name": "long", "chain": {"input_bytes": 10**6, "layers": [{"repeat": n, "layers": [
                {"name": "l", "fwd_flops": 10**9, "params": 1000, "output_bytes": 10**6, "saved_bytes": 5 * 10**5}]}]}},
            "cluster": {"preset": "dgx-a100-80g", "nodes": 1}, "batch": {"global": 8, "micro": 1}, "plan": {"dp": 8}}
with tempfile.TemporaryDirectory() as tmp:
    long = os.path.join(tmp, "long.json")
    json.dump(chain(2000), open(long, "w"))
    p = subprocess.run([STRATA, "tradeoff", long], capture_output=True, text=True, timeout=60)
    check(p.returncode == 2, f"2,000 stages: exit {p.returncode}, expected 2")
    check(f"{long}: model.chain: the optimal solver over 2000 stages" in p.stderr and "rule tradeoff-size" in p.stderr,
          "the refusal names the file, the path and the rule: " + p.stderr)
    run("tradeoff", long, "--levels", "2", rc=2)
    short = os.path.join(tmp, "short.json")
    json.dump(chain(60), open(short, "w"))
    check(json.loads(run("tradeoff", short, "--format", "json"))["stages"] == 60, "60 stages are solved")
    # A sweep of seconds shows its progress on stderr, a plain line when
    # stderr is not a terminal; one under 2 s shows none (200 stages at 100
    # levels, about 2.6e9 solver steps: 2-4 s on the 2-core machine).
    mid = os.path.join(tmp, "mid.json")
    json.dump(chain(200), open(mid, "w"))
    start = time.monotonic()
    p = subprocess.run([STRATA, "tradeoff", mid, "--format", "json"], capture_output=True, text=True, timeout=120)
    wall = time.monotonic() - start
    check(p.returncode == 0, f"200 stages: exit {p.returncode}: {p.stderr}")
    shown = "tradeoff: solving optimal recompute's tables (steps): " in p.stderr and "ETA" in p.stderr
    if wall > 3:
        check(shown, f"progress on stderr after {wall:.1f} s: " + repr(p.stderr))
    if wall < 1.9:
        check(p.stderr == "", f"no progress in {wall:.1f} s: " + repr(p.stderr))
    q = subprocess.run([STRATA, "tradeoff", mid, "--format", "json", "--quiet"], capture_output=True, text=True)
    check(q.returncode == 0 and q.stderr == "", "--quiet: no progress: " + repr(q.stderr))
print("ok")
