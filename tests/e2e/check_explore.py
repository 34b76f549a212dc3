#!/usr/bin/env python3
"""End-to-end checks of `strata explore` and `strata merge` (docs/explore.md).

Usage: check_explore.py STRATA SCENARIO, with SCENARIO a space of 192 plans
(tests/e2e/scenarios/gpt2-124m-explore.json): 48 break tp-divides-heads, 144
are scored.
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile


def run(*args, rc=0):
    p = subprocess.run([STRATA, *args], capture_output=True, text=True)
    if p.returncode != rc:
        sys.exit(f"{' '.join(args)}: exit {p.returncode}, expected {rc}\n{p.stdout[:2000]}\n{p.stderr}")
    return p


def check(cond, msg):
    if not cond:
        sys.exit("FAILED: " + msg)


def lines(path):
    with open(path) as f:
        return f.read().splitlines()


def summary(d):
    with open(os.path.join(d, "summary.json")) as f:
        return json.load(f)


def main():
    tmp = tempfile.mkdtemp(prefix="strata-e2e-explore-")
    try:
        a = os.path.join(tmp, "a")
        p = run("explore", SCENARIO, "--out", a, "--jobs", "2", "--top", "5", "--format", "json")
        out = json.loads(p.stdout)
        # Counts by hand: 4 tp · 4 zero · 3 recompute · 4 micro; tp 8 ∤ 12 heads.
        c = out["counts"]
        check(c["enumerated"] == 192, f"enumerated {c['enumerated']}")
        check(c["invalid"] == 48 and out["rejected_by_rule"]["tp-divides-heads"]["count"] == 48,
              "48 plans with tp 8")
        check(c["pruned_by_memory"] == 0, "GPT-2 fits everywhere")
        check(c["scored"] == 144, f"scored {c['scored']}")
        check(c["pareto"] + c["dominated"] == 144, "pareto + dominated = scored")
        check(out["run"]["jobs"] == 2, "jobs")
        # summary.json is stdout without the run's timing.
        del out["run"]
        check(summary(a) == out, "summary.json equals the printed summary")
        # Plain progress lines on stderr when it is not a terminal.
        check("explore: 192 plans checked, 144/144 scored (100.0 %)" in p.stderr,
              f"progress line: {p.stderr!r}")
        res = [json.loads(l) for l in lines(os.path.join(a, "results.jsonl"))]
        check(len(res) == 144 and len({r["plan_id"] for r in res}) == 144, "one line per scored plan")

        # A record is what `strata simulate --analytical` says about its plan.
        best = out["top"][0]
        sc = os.path.join(tmp, "best.json")
        with open(sc, "w") as f:
            json.dump({"model": "gpt2-124m", "cluster": "dgx-h100", "batch": best["batch"],
                       "plan": best["plan"]}, f)
        sim = json.loads(run("simulate", sc, "--analytical", "--format", "json").stdout)
        for k in ("step_time_s", "tokens_per_s_per_gpu", "mfu", "peak_memory_bytes",
                  "memory_breakdown_bytes", "time_breakdown_s", "bubble_fraction"):
            check(sim[k] == best[k], f"{k}: simulate {sim[k]} != explore {best[k]}")

        # Table and CSV.
        table = run("explore", SCENARIO, "--out", os.path.join(tmp, "t")).stdout
        check("tp-divides-heads" in table and "Pareto front" in table, "table output")
        csv = run("explore", SCENARIO, "--out", os.path.join(tmp, "c"), "--format", "csv").stdout
        check(csv.startswith("set,rank,plan_id,dp,tp,pp"), "csv header")

        # Resume after a kill mid-line: nothing lost, nothing twice.
        r = os.path.join(tmp, "r")
        shutil.copytree(a, r)
        path = os.path.join(r, "results.jsonl")
        data = open(path, "rb").read()
        cut = len(data) // 2
        with open(path, "wb") as f:
            f.write(data[:cut])
        kept = data[:cut].count(b"\n")
        run("explore", SCENARIO, "--out", r, "--top", "5", rc=2)  # without --resume
        out = json.loads(run("explore", SCENARIO, "--out", r, "--top", "5", "--resume",
                             "--format", "json").stdout)
        check(out["run"]["resumed"] == kept, f"resumed {out['run']['resumed']} != {kept}")
        check(out["run"]["scored_now"] == 144 - kept, "scored the rest")
        check(sorted(lines(path)) == sorted(lines(os.path.join(a, "results.jsonl"))),
              "results after resume equal the uninterrupted run")
        check(summary(r) == summary(a), "summary after resume")

        # Shards 0/2 and 1/2, merged, equal the whole run.
        for i in (0, 1):
            run("explore", SCENARIO, "--out", os.path.join(tmp, f"s{i}"), "--shard", f"{i}/2",
                "--top", "5", "--jobs", "1")
        m = os.path.join(tmp, "m")
        merged = json.loads(run("merge", os.path.join(tmp, "s0"), os.path.join(tmp, "s1"),
                                "--out", m, "--format", "json").stdout)
        check(merged["shards"] == {"count": 2, "indices": [0, 1]}, "merged shards")
        whole = summary(a)
        del merged["shards"], whole["shards"]
        check(merged == whole, "merged summary equals the unsharded one")
        check(sorted(lines(os.path.join(m, "results.jsonl"))) ==
              sorted(lines(os.path.join(a, "results.jsonl"))), "merged results")

        # Usage errors exit 2.
        e = run("explore", SCENARIO, "--out", os.path.join(tmp, "e"), "--shard", "2/2", rc=2)
        check("--shard" in e.stderr, e.stderr)
        e = run("merge", os.path.join(tmp, "s0"), os.path.join(tmp, "s0"), "--out", m, rc=2)
        check("shard 0 is merged twice" in e.stderr, e.stderr)
        # Merge writes a new directory: not one of its shards, not another
        # scenario's explore (nor someone's own files: report/explore_io_test.cpp).
        before = summary(os.path.join(tmp, "s0"))
        e = run("merge", os.path.join(tmp, "s0"), os.path.join(tmp, "s1"), "--out", os.path.join(tmp, "s0"), rc=2)
        check("is one of the directories merged" in e.stderr and e.stdout == "", e.stderr)
        e = run("merge", os.path.join(tmp, "s0"), os.path.join(tmp, "s1"), "--out", a, rc=2)
        check("manifest.json: shards.count: the directory holds plans of 1, the merge has 2" in e.stderr, e.stderr)
        check(summary(os.path.join(tmp, "s0")) == before, "a refused merge writes nothing")
    finally:
        shutil.rmtree(tmp)


STRATA, SCENARIO = sys.argv[1], sys.argv[2]
main()
