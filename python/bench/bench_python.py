#!/usr/bin/env python3
"""The Python module's speed against the CLI (docs/python.md, "Speed"):

  (a) strata.explore of the GPT-3 auto scenario against `strata explore`
      (both --jobs J, each writing results, summary and report), runs
      alternated, the median of each;
  (b) N strata.simulate calls on a small scenario against N CLI invocations
      (`strata simulate FILE --format json`, run by subprocess and parsed,
      as a script shelling out would).

    PYTHONPATH=BUILD/python python python/bench/bench_python.py BUILD/app/strata [--runs R] [--calls N] [--jobs J]

Wall time by time.perf_counter, one process, on this machine as it is.
(a) reports the medians and the fastest run of each.
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

import strata

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
AUTO = os.path.join(ROOT, "configs", "scenarios", "gpt3-175b-explore.json")
SMALL = os.path.join(ROOT, "configs", "scenarios", "gpt2-124m-1gpu.json")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("cli")
    ap.add_argument("--runs", type=int, default=2)
    ap.add_argument("--calls", type=int, default=1000)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--skip-explore", action="store_true")
    a = ap.parse_args()

    if not a.skip_explore:
        py, cl = [], []
        for run in range(a.runs):
            # Alternated, the order swapped every run: load from elsewhere
            # on the machine falls on both alike.
            for kind in (("cli", "python") if run % 2 == 0 else ("python", "cli")):
                d = tempfile.mkdtemp(prefix="strata-bench-")
                t0 = time.perf_counter()
                if kind == "cli":
                    p = subprocess.run([a.cli, "explore", AUTO, "--out", os.path.join(d, "o"), "--jobs", str(a.jobs),
                                        "--format", "json"], capture_output=True, text=True)
                    assert p.returncode == 0, p.stderr
                    summary = json.loads(p.stdout)
                    cl.append(time.perf_counter() - t0)
                else:
                    r = strata.explore(AUTO, out=os.path.join(d, "o"), jobs=a.jobs)
                    summary = r.summary
                    py.append(time.perf_counter() - t0)
                shutil.rmtree(d)
                print(f"explore {kind}: {(cl if kind == 'cli' else py)[-1]:.2f} s "
                      f"(counts {summary['counts']}, explorer wall {summary['run']['wall_s']:.2f} s)", flush=True)
        mp, mc = statistics.median(py), statistics.median(cl)
        print(f"(a) explore GPT-3 auto, --jobs {a.jobs}: python {mp:.2f} s, CLI {mc:.2f} s "
              f"(medians of {a.runs}): python/CLI = {mp / mc:.3f}; fastest runs {min(py):.2f} s / "
              f"{min(cl):.2f} s = {min(py) / min(cl):.3f}")

    t0 = time.perf_counter()
    for _ in range(a.calls):
        step = strata.simulate(SMALL)["step_time_s"]
    t_py = time.perf_counter() - t0
    t0 = time.perf_counter()
    for _ in range(a.calls):
        p = subprocess.run([a.cli, "simulate", SMALL, "--format", "json"], capture_output=True, text=True)
        assert json.loads(p.stdout)["step_time_s"] == step
    t_cli = time.perf_counter() - t0
    print(f"(b) {a.calls} x simulate {os.path.basename(SMALL)}: python {t_py:.2f} s "
          f"({1e3 * t_py / a.calls:.2f} ms/call), CLI {t_cli:.2f} s ({1e3 * t_cli / a.calls:.2f} ms/call): "
          f"{t_cli / t_py:.1f}x faster")


if __name__ == "__main__":
    sys.exit(main())
