#!/usr/bin/env python3
"""Crash safety of `strata explore` (docs/explore.md, "Resume, shards, merge").

Usage: check_kill_resume.py STRATA SCENARIO

Explores SCENARIO once without interruption. Then explores it again into a
second directory, killing the process with SIGKILL at 20 moments drawn from
a seeded generator (half in the first second, where plans are scored and
streamed to results.jsonl, half anywhere in an uninterrupted run's time) and
resuming after each kill, then lets the last run finish. The two
directories must hold the same results (every plan once, with the same
figures), the same re-simulated plans and the same summary.
"""
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time

KILLS = 20


def check(cond, msg):
    if not cond:
        sys.exit("FAILED: " + msg)


def explore(out, resume):
    args = [STRATA, "explore", SCENARIO, "--out", out, "--jobs", "2", "--format", "json"]
    if resume:
        args.append("--resume")
    return subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def records(path):
    with open(path) as f:
        text = f.read()
    check(text == "" or text.endswith("\n"), f"{path} ends mid-line")
    out = {}
    for line in text.splitlines():
        r = json.loads(line)
        check(r["plan_id"] not in out, f"{path}: plan {r['plan_id']} twice")
        out[r["plan_id"]] = r
    return out


def main():
    tmp = tempfile.mkdtemp(prefix="strata-e2e-kill-")
    try:
        whole = os.path.join(tmp, "whole")
        t0 = time.monotonic()
        p = explore(whole, False)
        _, err = p.communicate()
        check(p.returncode == 0, f"uninterrupted run: exit {p.returncode}\n{err}")
        span = time.monotonic() - t0

        rng = random.Random(20261130)
        moments = [rng.uniform(0.0, min(1.0, span)) for _ in range(KILLS // 2)]
        moments += [rng.uniform(0.0, span) for _ in range(KILLS - KILLS // 2)]
        cut = os.path.join(tmp, "cut")
        killed = 0
        for at in moments:
            resume = os.path.exists(os.path.join(cut, "results.jsonl"))
            p = explore(cut, resume)
            time.sleep(at)
            if p.poll() is None:
                p.send_signal(signal.SIGKILL)
                killed += 1
            _, err = p.communicate()
            check(p.returncode in (0, -signal.SIGKILL), f"run: exit {p.returncode}\n{err}")
        p = explore(cut, os.path.exists(os.path.join(cut, "results.jsonl")))
        _, err = p.communicate()
        check(p.returncode == 0, f"last resume: exit {p.returncode}\n{err}")
        check(killed >= KILLS // 2, f"only {killed} of {KILLS} runs were still running when killed")

        a = records(os.path.join(whole, "results.jsonl"))
        b = records(os.path.join(cut, "results.jsonl"))
        check(a.keys() == b.keys(), f"{len(a)} plans uninterrupted, {len(b)} after the kills")
        check(a == b, "the same plans have other figures after the kills")
        check(records(os.path.join(whole, "refined.jsonl")) == records(os.path.join(cut, "refined.jsonl")),
              "refined.jsonl differs")
        with open(os.path.join(whole, "summary.json")) as f, open(os.path.join(cut, "summary.json")) as g:
            check(json.load(f) == json.load(g), "summary.json differs")
        print(f"kill-resume: {killed} kills in {KILLS} runs, {len(b)} plans, none lost or twice")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    STRATA, SCENARIO = sys.argv[1], sys.argv[2]
    main()
