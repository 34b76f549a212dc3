#!/usr/bin/env python3
"""End-to-end checks of `strata calibrate --backend cpu` and `strata validate
SCENARIO --backend cpu`: the calibration file reads back and is what
validate uses, validate's JSON has the contract's fields, the cache is
made on first use and reused, every plan of the accuracy matrix
(bench/validate_matrix.py: 22 plans on 4 ranks, 16 on 2) validates, bad input exits
2 with nothing on stdout. Plumbing only: no timing is checked (the machines are noisy).

    check_validate.py STRATA SOURCE_DIR

Exits 77 (skipped) when the build has no Google Benchmark to calibrate with.
"""
import json
import os
import subprocess
import sys
import tempfile

strata, root = sys.argv[1], sys.argv[2]
tiny = os.path.join(root, "configs", "scenarios", "tiny-cpu.json")
failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL:", what, file=sys.stderr)


def run(*args, env=None):
    return subprocess.run([strata, *args], capture_output=True, text=True, env=env, timeout=300)


with tempfile.TemporaryDirectory() as tmp:
    cal = os.path.join(tmp, "cal.json")
    p = run("calibrate", "--backend", "cpu", "--quick", "--ranks", "2", "--out", cal, "--format", "json")
    if p.returncode != 0 and "Google Benchmark" in p.stderr:
        print("skipped: this build cannot calibrate (no Google Benchmark)")
        sys.exit(77)
    check(p.returncode == 0, f"calibrate exits 0 (got {p.returncode}: {p.stderr})")
    written = json.load(open(cal))
    check(json.loads(p.stdout) == written, "calibrate --format json prints the file it wrote")
    check(written["backend"] == "cpu", "the calibration says backend cpu")
    for key in ("gemm", "memory", "copies", "collectives", "overheads_us"):
        check(key in written, f"the calibration has {key}")
    check(written["gemm"]["fp32"]["peak_tflops"] == 0.085,
          "GEMM points are written against cpu-local's fp32 peak")
    check(written["memory"]["peak_GBps"] == 10, "memory points are written against cpu-local's 10 GB/s")
    check(written["collectives"]["intra_node"]["group"] == 2, "collectives measured over --ranks threads")

    p = run("validate", tiny, "--backend", "cpu", "--calibration", cal, "--steps", "2", "--format", "json")
    check(p.returncode == 0, f"validate exits 0 (got {p.returncode}: {p.stderr})")
    r = json.loads(p.stdout) if p.returncode == 0 else {}
    check(r.get("ranks") == 4 and r.get("dp") == 2 and r.get("pp") == 2, "tiny-cpu runs on 4 ranks, dp 2 x pp 2")
    check(len(r.get("step_times_s", [])) == 2, "two measured steps")
    for side in ("predicted", "measured"):
        s = r.get(side, {})
        check(s.get("step_time_s", 0) > 0, f"{side}.step_time_s > 0")
        peaks = [x["peak_bytes"] for x in s.get("memory_per_rank", [])]
        check(len(peaks) == 4, f"{side}: memory per rank for 4 ranks")
        check(s.get("peak_memory_bytes") == max(peaks or [0]), f"{side}.peak_memory_bytes is the highest rank's")
        for tag in ("params", "grads", "optimizer_states", "activations", "comm_buffers"):
            check(tag in s.get("memory_breakdown_bytes", {}), f"{side}.memory_breakdown_bytes.{tag}")
        for kind in ("forward", "backward", "recompute", "collective", "p2p", "copy", "optimizer"):
            check(kind in s.get("time_by_kind_s", {}), f"{side}.time_by_kind_s.{kind}")
        check(s.get("time_by_kind_s", {}).get("recompute", 0) > 0, f"{side}: tiny-cpu recomputes (selective)")
    check(r.get("calibration", "").startswith(written["machine"]), "validate names the calibration it used")
    check(len(r.get("tasks", [])) > 0 and all({"id", "kind", "predicted_s", "measured_s"} <= set(t) for t in r["tasks"]),
          "one row per task with predicted_s and measured_s")

    p = run("validate", tiny, "--backend", "cpu", "--calibration", cal, "--steps", "1")
    check(p.returncode == 0 and "step time (ms)" in p.stdout and "peak memory" in p.stdout,
          "the table shows step time and peak memory")

    # Every plan of the accuracy matrix (bench/validate_matrix.py) runs on 4
    # ranks and validates (plumbing: one measured step, no timing checked).
    sys.dont_write_bytecode = True  # no __pycache__ in the source tree
    sys.path.insert(0, os.path.join(root, "bench"))
    import validate_matrix
    check(len(validate_matrix.MATRIX) >= 12, "the accuracy matrix has at least 12 plans")
    check(len(validate_matrix.MATRIX2) >= 12, "the 2-rank accuracy matrix has at least 12 plans")
    for ranks in (4, 2):
        where = os.path.join(tmp, f"matrix{ranks}")
        os.makedirs(where)
        for name, path in validate_matrix.write_scenarios(where, ranks):
            p = run("validate", path, "--backend", "cpu", "--calibration", cal, "--steps", "1", "--format", "json")
            ok = p.returncode == 0 and json.loads(p.stdout)["ranks"] == ranks
            check(ok, f"matrix plan {name} validates on {ranks} ranks ({p.returncode}: {p.stderr.strip()})")

    # First use without a calibration file: measured quickly into the cache, then reused.
    env = dict(os.environ, XDG_CACHE_HOME=os.path.join(tmp, "cache"))
    cached = os.path.join(tmp, "cache", "strata", "cpu-calibration.json")
    p = run("validate", tiny, "--backend", "cpu", "--steps", "1", "--format", "json", env=env)
    check(p.returncode == 0, f"validate without a calibration exits 0 ({p.stderr})")
    check(os.path.exists(cached), "the first use writes the cached calibration")
    check("measuring" in p.stderr, "the first use says it measures")
    p = run("validate", tiny, "--backend", "cpu", "--steps", "1", "--format", "json", env=env)
    check(p.returncode == 0 and "measuring" not in p.stderr, "the second use reads the cache")
    # With --calibration the cache is neither used nor announced.
    p = run("validate", tiny, "--backend", "cpu", "--calibration", cal, "--steps", "1", "--format", "json", env=env)
    check(p.returncode == 0 and cached not in p.stderr,
          f"a calibration given: the cached one is not announced ({p.stderr.strip()})")
    # A cache that does not read (torn, or written by something else) is
    # measured again over, with a warning naming it; the run goes on.
    for torn in ("{\"gpu\": \"cpu\", \"gemm", "not json at all"):
        with open(cached, "w") as f:
            f.write(torn)
        p = run("validate", tiny, "--backend", "cpu", "--steps", "1", "--format", "json", env=env)
        check(p.returncode == 0, f"a corrupt cache does not fail validate ({p.returncode}: {p.stderr.strip()})")
        check("does not read" in p.stderr and cached in p.stderr and "measuring" in p.stderr,
              f"a corrupt cache is named and measured again ({p.stderr.strip()})")
        json.load(open(cached))  # the cache is whole again

    # Bad input: exit 2, message on stderr, nothing on stdout.
    p = run("validate", tiny, "--backend", "cpu", "--calibration", os.path.join(tmp, "missing.json"))
    check(p.returncode == 2 and p.stdout == "" and "file not found" in p.stderr, "a missing calibration file exits 2")
    # The bundled scenario opens with // comments (Strata reads them; json does not).
    tp = json.loads("".join(l for l in open(tiny) if not l.lstrip().startswith("//")))
    tp["plan"] = {**tp["plan"], "schedule": "pipedream"}
    tp_path = os.path.join(tmp, "tp.json")
    json.dump(tp, open(tp_path, "w"))
    p = run("validate", tp_path, "--backend", "cpu", "--calibration", cal)
    check(p.returncode == 2 and p.stdout == "" and "asynchronous pipedream" in p.stderr,
          f"a plan the executor refuses exits 2 naming why ({p.returncode}: {p.stderr.strip()})")
    bad = os.path.join(tmp, "bad-cal.json")
    json.dump({**written, "memory": {"peak_GBps": 10, "points": [{"bytes": 1024, "GBps": 50}]}}, open(bad, "w"))
    p = run("validate", tiny, "--backend", "cpu", "--calibration", bad)
    check(p.returncode == 2 and p.stdout == "" and "memory.points" in p.stderr,
          f"a calibration above its peak exits 2 naming the JSON path ({p.stderr.strip()})")
    # SIGINT and SIGTERM end the measurement after the step in flight: exit
    # 128 + the signal, the comparison of the steps measured so far printed.
    import signal
    import time
    for sig, code in ((signal.SIGINT, 130), (signal.SIGTERM, 143)):
        p = subprocess.Popen([strata, "validate", tiny, "--backend", "cpu", "--steps", "1000000",
                              "--calibration", cal, "--format", "json"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        time.sleep(3)
        p.send_signal(sig)
        out, err = p.communicate(timeout=120)
        check(p.returncode == code, f"signal {sig}: exit {p.returncode}, expected {code}: {err}")
        try:
            j = json.loads(out)
            check(j["stopped"] is True and j["steps_asked"] == 1000000 and 1 <= j["steps"] < 1000000,
                  f"signal {sig}: the report says it stopped after {j['steps']} steps")
            check(j["measured"]["step_time_s"] > 0, f"signal {sig}: a measured step time")
        except (ValueError, KeyError) as e:
            check(False, f"signal {sig}: no report: {e}: {out[:200]!r}")
        check(f"stopped by signal {int(sig)}" in err, err)
    # calibrate stops after the benchmark in flight: the table of what it
    # measured, nothing written (a calibration needs every curve), 128 + the
    # signal. The full grid runs for minutes, so the signal comes mid-way.
    for sig, code in ((signal.SIGINT, 130), (signal.SIGTERM, 143)):
        out_cal = os.path.join(tmp, f"stopped-{int(sig)}.json")
        p = subprocess.Popen([strata, "calibrate", "--backend", "cpu", "--ranks", "2", "--out", out_cal],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        time.sleep(2)
        p.send_signal(sig)
        out, err = p.communicate(timeout=120)
        check(p.returncode == code, f"calibrate, signal {sig}: exit {p.returncode}, expected {code}: {err}")
        check("stopped: " in out and " benchmarks ran" in out, f"calibrate, signal {sig}: the table says it stopped: {out[:300]!r}")
        check(not os.path.exists(out_cal), f"calibrate, signal {sig}: nothing written")
        check("nothing written" in err and f"stopped by signal {int(sig)}" in err, err)

if failures:
    sys.exit(f"{len(failures)} check(s) failed")
print("ok")
