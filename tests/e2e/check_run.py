#!/usr/bin/env python3
"""End-to-end checks of `strata run --backend cpu` on the bundled tiny-cpu scenario.

Usage: check_run.py STRATA SCENARIO
"""
import json
import math
import os
import subprocess
import sys
import tempfile


def run(strata, *args, expect=0):
    p = subprocess.run([strata, *args], capture_output=True, text=True)
    if p.returncode != expect:
        sys.exit(f"{' '.join(args)}: exit {p.returncode}, expected {expect}\n{p.stderr}")
    return p


def check(cond, msg):
    if not cond:
        sys.exit("FAILED: " + msg)


def main(strata, scenario):
    # The CPU calibration run measures on first use goes to a cache of this
    # test's own, not the user's.
    os.environ["XDG_CACHE_HOME"] = tempfile.mkdtemp(prefix="strata-e2e-run-cache-")
    # 50 steps on the Markov corpus (vocab 16): the first loss is about
    # log 16 = 2.77 (uniform logits at initialisation); the last five average
    # at least 0.5 nats lower, and not below the entropy rate, the best loss
    # any model can reach (minus sampling noise of a 512-token batch).
    out = run(strata, "run", scenario, "--backend", "cpu", "--steps", "50", "--format", "json").stdout
    d = json.loads(out)
    losses = [s["loss"] for s in d["steps"]]
    check(len(losses) == 50 and [s["step"] for s in d["steps"]] == list(range(1, 51)), "50 steps")
    check(abs(losses[0] - math.log(16)) < 0.1, f"first loss {losses[0]} vs log 16")
    last = sum(losses[-5:]) / 5
    best = d["best_loss"]
    check(last < losses[0] - 0.5, f"loss does not fall: {losses[0]} -> {last}")
    check(last > best - 0.1, f"loss {last} below the entropy rate {best}")
    check(d["ranks"] == 4 and d["dp"] == 2 and d["pp"] == 2, "dp 2 x pp 2 = 4 rank threads")
    check(len(d["memory_per_rank"]) == 4, "memory of every rank")
    check(d["peak_memory_bytes"] == max(m["peak_bytes"] for m in d["memory_per_rank"]),
          "peak_memory_bytes is the highest rank's")
    for m in d["memory_per_rank"]:
        tags = m["peak_bytes_by_tag"]
        check(tags["params"] > 0 and tags["activations"] > 0 and tags["comm_buffers"] > 0,
              f"rank {m['rank']}: {tags}")
        check(m["host_peak_bytes"] == 0, "no offload, nothing on the host pool")
    check(all(s["step_time_s"] > 0 for s in d["steps"]), "step times")
    # Reproducible run to run: same seed, deterministic ring order.
    again = json.loads(run(strata, "run", scenario, "--backend", "cpu", "--steps", "3",
                           "--format", "json").stdout)
    check([s["loss"] for s in again["steps"]] == losses[:3], "the same losses on a second run")
    # The table names the data and the best loss.
    table = run(strata, "run", scenario, "--backend", "cpu", "--steps", "2").stdout
    check("entropy rate" in table and "peak memory per rank" in table, table)
    # --trace: the last step's measured task times under the graph's task ids,
    # in simulate --trace's format (Chrome trace events).
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "run.json")
        run(strata, "run", scenario, "--backend", "cpu", "--steps", "2", "--trace", path)
        with open(path) as f:
            events = json.load(f)["traceEvents"]
    names = {e["name"] for e in events if e.get("ph") == "X"}
    for task in ("s0:fwd/embedding/mb0", "s0:fwd/L0/mb0", "s1:fwd/head/mb3", "s1:bwd/L3/mb0",
                 "s0:send-act/c0/mb0", "s0:dp-reduce/bucket0", "s1:optimizer-step"):
        check(task in names, f"{task} not in the measured trace")
    # --data needs a byte-level model (vocab 256): bad input, exit 2, naming the rule.
    bad = run(strata, "run", scenario, "--backend", "cpu", "--data", __file__, expect=2)
    check("model.vocab" in bad.stderr and bad.stdout == "", bad.stderr)
    # With vocab 256 any file trains: this script's own bytes, 3 steps from
    # about log 256 = 5.55.
    with open(scenario) as f:
        text = "\n".join(line for line in f if not line.lstrip().startswith("//"))
    sc = json.loads(text)
    sc["model"]["vocab"] = 256
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "bytes.json")
        with open(path, "w") as f:
            json.dump(sc, f)
        b = json.loads(run(strata, "run", path, "--backend", "cpu", "--steps", "3", "--data", __file__,
                           "--format", "json").stdout)
        # The corpus is an input: as the trace's target it is refused, intact.
        corpus = os.path.join(tmp, "corpus.bin")
        with open(corpus, "wb") as f:
            f.write(bytes(range(256)) * 64)
        same = run(strata, "run", path, "--backend", "cpu", "--steps", "1", "--data", corpus, "--trace", corpus,
                   expect=2)
        with open(corpus, "rb") as f:
            check(f.read() == bytes(range(256)) * 64 and "--trace is the input" in same.stderr,
                  f"--trace onto the --data corpus: {same.stderr}")
    check(b["best_loss"] is None and abs(b["steps"][0]["loss"] - math.log(256)) < 0.1,
          f"byte-level first loss {b['steps'][0]['loss']}")
    # What the executor does not run is bad input naming the rule.
    sc["plan"]["schedule"] = "pipedream"
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "tp.json")
        with open(path, "w") as f:
            json.dump(sc, f)
        tp = run(strata, "run", path, "--backend", "cpu", expect=2)
    check("asynchronous pipedream" in tp.stderr, tp.stderr)

    # Gradient compression on the same plan (dp 2 x pp 2, ZeRO-1, tied
    # embedding): every method trains, reproducibly, its exchange appears in
    # the trace under the lowering's task ids; ZeRO-2 with compression is
    # bad input.
    with open(scenario) as f:
        sc = json.loads("\n".join(line for line in f if not line.lstrip().startswith("//")))
    methods = {"topk": {"ratio": 0.03}, "randomk": {"ratio": 0.25}, "qsgd": {"bits": 4},
               "onebit": {}, "powersgd": {"rank": 2}}
    with tempfile.TemporaryDirectory() as tmp:
        for method, keys in methods.items():
            sc["plan"]["compression"] = {"method": method, **keys}
            path = os.path.join(tmp, method + ".json")
            with open(path, "w") as f:
                json.dump(sc, f)
            trace = os.path.join(tmp, method + ".trace.json")
            c = json.loads(run(strata, "run", path, "--backend", "cpu", "--steps", "20", "--trace", trace,
                               "--format", "json").stdout)
            losses = [s["loss"] for s in c["steps"]]
            check(abs(losses[0] - math.log(16)) < 0.1 and sum(losses[-5:]) / 5 < losses[0] - 0.4,
                  f"{method}: loss does not fall: {losses}")
            if method in ("randomk", "qsgd"):  # seeded draws: the same losses again
                again = json.loads(run(strata, "run", path, "--backend", "cpu", "--steps", "3",
                                       "--format", "json").stdout)
                check([s["loss"] for s in again["steps"]] == losses[:3], f"{method}: not reproducible")
            with open(trace) as f:
                names = {e["name"] for e in json.load(f)["traceEvents"] if e.get("ph") == "X"}
            rounds = 2 if method in ("onebit", "powersgd") else 1
            for s in (0, 1):
                for task in ["compress-encode", "compress-decode"] + [f"dp-compressed/round{i}" for i in range(rounds)]:
                    check(f"s{s}:{task}" in names, f"{method}: s{s}:{task} not in the measured trace")
            check(not any("dp-reduce" in n for n in names), f"{method}: a dense dp-reduce ran")
        sc["plan"]["zero"] = 2
        path = os.path.join(tmp, "zero2.json")
        with open(path, "w") as f:
            json.dump(sc, f)
        z2 = run(strata, "run", path, "--backend", "cpu", expect=2)
    check("compression" in z2.stderr and "zero" in z2.stderr.lower(), z2.stderr)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
