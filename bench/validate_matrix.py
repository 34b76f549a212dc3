#!/usr/bin/env python3
"""Predicted against measured step time on the CPU backend, over a fixed
matrix of plans on 4 (or 2) rank threads (docs/accuracy.md, "CPU backend").

    bench/validate_matrix.py STRATA [--ranks 4|2] [--calibration FILE] [--steps N] [--rounds R] [--markdown]

Runs `strata validate PLAN --backend cpu --format json` for every plan of
MATRIX (one small GPT, every plan on 4 ranks: data parallelism with ZeRO 0-3,
pipelines with GPipe, 1F1B and interleaved schedules, mixes of both,
recompute policies, activation offload, tensor and context parallelism) or,
with --ranks 2, of MATRIX2 (the same kinds of plan on 2 ranks, for a
machine with a core per rank thread: the ranking the step-time issue judges
against the measurement's own round-to-round tau), then prints each plan's predicted
and measured step time and peak memory, the median |error| of the step time
Kendall's tau-b between the predicted and the measured ranking, and the
schedule check (validate's replay of the measured task times through the
engine) against the measured step. With
--rounds R > 1 the matrix runs R times, plan after plan each round (so a
change of the machine's load touches every plan alike); a plan's measured
step time is the median of its rounds' medians, and tau-b between rounds
(measured against measured) shows how much of the ranking the noise
alone decides. A benchmark, not a test: the figures depend on the machine
and its load.
"""
import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile

MODEL = {
    "name": "cpu-matrix",
    "layers": 8, "hidden": 128, "heads": 4, "ffn_hidden": 512, "vocab": 256, "seq_len": 64,
    "mlp": "gelu", "norm": "layernorm", "bias": True, "position_embedding": "learned",
    "tied_embeddings": True, "dropout": False,
    "source": "made up for the CPU backend's accuracy matrix",
}
BATCH = {"global": 16, "micro": 2}
BASE = {"precision": "fp32", "optimizer": "adam", "implementation": {"attention": "standard"}}

# name -> plan keys (on top of BASE); every plan has dp * tp * cp * pp = 4.
MATRIX = [
    ("dp4", {"dp": 4}),
    ("dp4-zero1", {"dp": 4, "zero": 1}),
    ("dp4-zero2", {"dp": 4, "zero": 2}),
    ("dp4-zero3", {"dp": 4, "zero": 3}),
    ("dp4-selective", {"dp": 4, "recompute": "selective"}),
    ("dp4-full", {"dp": 4, "recompute": "full"}),
    ("dp4-offload", {"dp": 4, "offload": {"activations": True}}),
    ("pp4-gpipe", {"pp": 4, "schedule": "gpipe"}),
    ("pp4-1f1b", {"pp": 4, "schedule": "1f1b"}),
    ("pp4-interleaved2", {"pp": 4, "schedule": "interleaved", "virtual_stages": 2}),
    ("pp4-1f1b-full", {"pp": 4, "schedule": "1f1b", "recompute": "full"}),
    ("dp2-pp2-1f1b", {"dp": 2, "pp": 2, "schedule": "1f1b"}),
    ("dp2-pp2-1f1b-zero1-selective", {"dp": 2, "pp": 2, "schedule": "1f1b", "zero": 1, "recompute": "selective"}),
    ("dp2-pp2-gpipe-zero3", {"dp": 2, "pp": 2, "schedule": "gpipe", "zero": 3}),
    ("dp2-pp2-1f1b-offload", {"dp": 2, "pp": 2, "schedule": "1f1b", "offload": {"activations": True}}),
    ("dp2-pp2-every2", {"dp": 2, "pp": 2, "schedule": "1f1b", "recompute": "every_k", "recompute_k": 2}),
    ("tp4", {"tp": 4}),
    ("tp2-dp2-sp", {"tp": 2, "dp": 2, "sequence_parallel": True}),
    ("tp2-pp2-sp-1f1b", {"tp": 2, "pp": 2, "sequence_parallel": True, "schedule": "1f1b"}),
    ("tp2-dp2-zero1-full", {"tp": 2, "dp": 2, "zero": 1, "recompute": "full"}),
    ("cp4", {"cp": 4}),
    ("cp2-dp2", {"cp": 2, "dp": 2}),
]

# The same kinds of plan on 2 ranks (dp * tp * cp * pp = 2).
MATRIX2 = [
    ("dp2", {"dp": 2}),
    ("dp2-zero1", {"dp": 2, "zero": 1}),
    ("dp2-zero2", {"dp": 2, "zero": 2}),
    ("dp2-zero3", {"dp": 2, "zero": 3}),
    ("dp2-selective", {"dp": 2, "recompute": "selective"}),
    ("dp2-full", {"dp": 2, "recompute": "full"}),
    ("dp2-every2", {"dp": 2, "recompute": "every_k", "recompute_k": 2}),
    ("dp2-offload", {"dp": 2, "offload": {"activations": True}}),
    ("pp2-gpipe", {"pp": 2, "schedule": "gpipe"}),
    ("pp2-1f1b", {"pp": 2, "schedule": "1f1b"}),
    ("pp2-interleaved2", {"pp": 2, "schedule": "interleaved", "virtual_stages": 2}),
    ("pp2-1f1b-full", {"pp": 2, "schedule": "1f1b", "recompute": "full"}),
    ("tp2", {"tp": 2}),
    ("tp2-sp", {"tp": 2, "sequence_parallel": True}),
    ("tp2-full", {"tp": 2, "recompute": "full"}),
    ("cp2", {"cp": 2}),
]


def scenario(plan, ranks):
    return {"model": MODEL, "cluster": {"preset": "cpu-local", "gpus_per_node": ranks},
            "batch": BATCH, "plan": {**BASE, **plan}}


def write_scenarios(directory, ranks):
    paths = []
    for name, plan in (MATRIX if ranks == 4 else MATRIX2):
        path = os.path.join(directory, name + ".json")
        with open(path, "w") as f:
            json.dump(scenario(plan, ranks), f, indent=1)
        paths.append((name, path))
    return paths


def kendall_tau_b(a, b):
    c = d = ta = tb = n = 0
    for i in range(len(a)):
        for j in range(i + 1, len(a)):
            n += 1
            da, db = a[i] - a[j], b[i] - b[j]
            ta += da == 0
            tb += db == 0
            if da == 0 or db == 0:
                continue
            if (da > 0) == (db > 0):
                c += 1
            else:
                d += 1
    return (c - d) / math.sqrt((n - ta) * (n - tb))


def run(strata, path, calibration, steps):
    cmd = [strata, "validate", path, "--backend", "cpu", "--format", "json", "--steps", str(steps)]
    if calibration:
        cmd += ["--calibration", calibration]
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"{' '.join(cmd)}: exit {p.returncode}\n{p.stderr}")
    return json.loads(p.stdout)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("strata")
    ap.add_argument("--ranks", type=int, choices=[2, 4], default=4)
    ap.add_argument("--calibration")
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--markdown", action="store_true")
    ap.add_argument("--keep", help="write the scenarios and outputs to this directory")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        where = args.keep or tmp
        os.makedirs(where, exist_ok=True)
        scenarios = write_scenarios(where, args.ranks)
        rounds = []  # per round: name -> output
        for k in range(args.rounds):
            out = {}
            for name, path in scenarios:
                r = run(args.strata, path, args.calibration, args.steps)
                if args.keep:
                    with open(os.path.join(where, f"{name}.{k}.out.json"), "w") as f:
                        json.dump(r, f, indent=1)
                out[name] = r
                print(f"round {k}: {name}: predicted {r['predicted']['step_time_s']*1e3:.1f} ms, "
                      f"measured {r['measured']['step_time_s']*1e3:.1f} ms", file=sys.stderr)
            rounds.append(out)
    rows = []
    for name, _ in scenarios:
        r = dict(rounds[0][name])
        r["measured"] = dict(r["measured"])
        r["measured"]["step_time_s"] = statistics.median(x[name]["measured"]["step_time_s"] for x in rounds)
        rows.append((name, r))
    pred = [r["predicted"]["step_time_s"] for _, r in rows]
    meas = [r["measured"]["step_time_s"] for _, r in rows]
    errs = [abs(p - m) / m for p, m in zip(pred, meas)]
    tau = kendall_tau_b(pred, meas)
    sep = " | " if args.markdown else "  "
    # The schedule check: the measured task times replayed through the
    # engine, against the measured step (median over the rounds).
    replay = [statistics.median(x[name]["replay"]["error"] for x in rounds) for name, _ in rows]
    head = ["plan", "predicted ms", "measured ms", "error", "replay", "pred peak B", "meas peak B", "peak gap B"]
    if args.markdown:
        print("| " + " | ".join(head) + " |")
        print("|---|" + "---:|" * (len(head) - 1))
    else:
        print(sep.join(head))
    for (name, r), p, m, rp in zip(rows, pred, meas, replay):
        pp, mp = r["predicted"]["peak_memory_bytes"], r["measured"]["peak_memory_bytes"]
        cells = [name, f"{p*1e3:.1f}", f"{m*1e3:.1f}", f"{100*(p-m)/m:+.1f} %", f"{100*rp:+.1f} %",
                 str(pp), str(mp), str(pp - mp)]
        print(("| " + " | ".join(cells) + " |") if args.markdown else sep.join(cells))
    print()
    print(f"plans: {len(rows)}; rounds: {args.rounds}; steps per plan and round: {args.steps}; "
          f"median |step time error|: {100*statistics.median(errs):.1f} %; "
          f"Kendall tau-b (predicted vs measured ranking): {tau:.3f}")
    print(f"schedule replay within 5 % of the measured step: {sum(abs(x) <= 0.05 for x in replay)} of {len(replay)} "
          f"plans (median over rounds; worst {100*max(replay, key=abs):+.1f} %)")
    if args.rounds > 1:
        names = [n for n, _ in scenarios]
        taus = [kendall_tau_b([rounds[i][n]["measured"]["step_time_s"] for n in names],
                              [rounds[j][n]["measured"]["step_time_s"] for n in names])
                for i in range(args.rounds) for j in range(i + 1, args.rounds)]
        print("Kendall tau-b between rounds (measured vs measured): " +
              ", ".join(f"{t:.3f}" for t in taus))
        # The step-time issue's criterion: the prediction ranks the plans
        # within 0.1 of how well the measurement ranks them itself.
        own = statistics.mean(taus)
        print(f"predicted tau-b {tau:.3f} against the rounds' mean {own:.3f}: "
              f"{'within' if tau >= own - 0.1 else 'not within'} 0.1")


if __name__ == "__main__":
    main()
