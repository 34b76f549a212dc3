#!/usr/bin/env python3
"""Determinism: the same input gives the same bytes.

Usage: check_determinism.py STRATA SIMULATE_SCENARIO EXPLORE_SCENARIO...

- `strata simulate --format json --trace` twice: identical JSON and trace;
- for each explore scenario (one with a training goal ranks by time to train),
  `strata explore` with --jobs 1 and with --jobs 2: identical summary.json,
  refined.jsonl, report.html, report.md and results.csv, and the same
  results.jsonl lines (written in completion order, so compared as a set);
- `strata report` of one directory twice: identical files.
"""
import filecmp
import os
import shutil
import subprocess
import sys
import tempfile


def check(cond, msg):
    if not cond:
        sys.exit("FAILED: " + msg)


def run(*args, cwd=None):
    p = subprocess.run([STRATA, *args], capture_output=True, cwd=cwd)
    check(p.returncode == 0, f"{' '.join(args)}: exit {p.returncode}\n{p.stderr.decode()}")
    return p.stdout


def same_file(a, b):
    check(filecmp.cmp(a, b, shallow=False), f"{a} and {b} differ")


def check_explore(tmp, tag, explore):
    # The report names its directory as given: the same relative name in
    # two working directories.
    for d in ("a", "b"):
        os.mkdir(os.path.join(tmp, tag + d))
    run("explore", explore, "--out", "sweep", "--jobs", "1", "--format", "json", cwd=os.path.join(tmp, tag + "a"))
    run("explore", explore, "--out", "sweep", "--jobs", "2", "--format", "json", cwd=os.path.join(tmp, tag + "b"))
    one, two = os.path.join(tmp, tag + "a", "sweep"), os.path.join(tmp, tag + "b", "sweep")
    for name in ("summary.json", "refined.jsonl", "report.html", "report.md", "results.csv"):
        same_file(os.path.join(one, name), os.path.join(two, name))
    with open(os.path.join(one, "results.jsonl")) as f, open(os.path.join(two, "results.jsonl")) as g:
        a, b = f.read().splitlines(), g.read().splitlines()
    check(len(a) == len(b) and sorted(a) == sorted(b), "results.jsonl lines differ between --jobs 1 and 2")

    r1, r2 = os.path.join(tmp, tag + "r1"), os.path.join(tmp, tag + "r2")
    run("report", one, "--out", r1)
    run("report", one, "--out", r2)
    for name in ("report.html", "report.md", "results.csv"):
        same_file(os.path.join(r1, name), os.path.join(r2, name))
    print(f"determinism: explore {os.path.basename(explore)} (jobs 1 vs 2, {len(a)} plans) and report byte-identical")


def main():
    tmp = tempfile.mkdtemp(prefix="strata-e2e-determinism-")
    try:
        t1, t2 = os.path.join(tmp, "t1.json"), os.path.join(tmp, "t2.json")
        j1 = run("simulate", SIMULATE, "--format", "json", "--trace", t1)
        j2 = run("simulate", SIMULATE, "--format", "json", "--trace", t2)
        check(j1 == j2, "simulate --format json differs between runs")
        same_file(t1, t2)
        print("determinism: simulate and trace byte-identical")

        for n, explore in enumerate(EXPLORE):
            check_explore(tmp, str(n), explore)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    if len(sys.argv) < 4:
        sys.exit(__doc__)
    STRATA, SIMULATE = (os.path.abspath(a) for a in sys.argv[1:3])
    EXPLORE = [os.path.abspath(a) for a in sys.argv[3:]]
    main()
