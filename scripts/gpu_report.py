#!/usr/bin/env python3
"""Writes gpu-report.json and gpu-report.md from what scripts/gpu-check.sh
left in OUT (calibration.json, step-gemms.json, validate-<scenario>.json) and
WORK (phases.tsv: one line per step; tests.txt: CTest's lines).

    gpu_report.py OUT WORK SCENARIO...

Targets (issue 8, on an H200): the training step's large GEMMs at 70 % or
more of the calibrated cuBLAS peak; predicted step time within 10 % and
peak memory within 3 % of the measured ones. Every figure in the report is
read from those files; a missing file leaves its part empty and says so.
"""
import json
import os
import re
import sys

GEMM_TARGET = 0.70
STEP_TIME_TARGET = 0.10
MEMORY_TARGET = 0.03


def load(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def phases(work):
    rows = []
    try:
        with open(os.path.join(work, "phases.tsv")) as f:
            for line in f:
                name, status, seconds, note = (line.rstrip("\n").split("\t") + [""] * 4)[:4]
                rows.append({"name": name, "status": status, "seconds": int(seconds or 0), "note": note})
    except OSError:
        pass
    return rows


def tests(work):
    rows = []
    try:
        with open(os.path.join(work, "tests.txt")) as f:
            for line in f:
                m = re.search(r"Test +#\d+: (\S+) \.*\**\s*(Passed|Failed|\*\*\*Failed|Not Run|Skipped|\*\*\*Skipped|\*\*\*Timeout|\*\*\*Exception\S*)", line)
                if m:
                    rows.append({"name": m.group(1), "status": m.group(2).strip("*").lower()})
    except OSError:
        pass
    return rows


def calibration(out):
    c = load(os.path.join(out, "calibration.json"))
    if not c:
        return None
    peaks = {}
    for dtype, table in c.get("gemm", {}).items():
        pts = [p.get("tflops", 0) for p in table.get("points", [])]
        if pts:
            peaks[dtype] = max(pts)

    def best(table):
        pts = [p.get("GBps", 0) for p in (table or {}).get("points", [])]
        return max(pts) if pts else None

    copies = c.get("copies", {})
    return {
        "file": "calibration.json",
        "machine": c.get("machine"),
        "gemm_peak_tflops": peaks,
        "hbm_GBps": best(c.get("memory")),
        "h2d_pinned_GBps": best(copies.get("h2d_pinned")),
        "d2h_pinned_GBps": best(copies.get("d2h_pinned")),
        "collectives": "collectives" in c,
        "overheads_us": c.get("overheads_us"),
    }


def step_gemms(out, fp32_peak):
    g = load(os.path.join(out, "step-gemms.json"))
    if not g:
        return None
    frac = (lambda t: t / fp32_peak) if fp32_peak else (lambda t: None)
    g["large_fraction_of_calibrated_fp32_peak"] = frac(g["large_tflops"])
    for s in g["shapes"]:
        s["in_step_fraction_of_peak"] = frac(s["in_step_tflops"])
    return g


def scenario(out, name):
    v = load(os.path.join(out, f"validate-{name}.json"))
    if not v:
        return {"name": name, "ran": False}
    p, m, e = v["predicted"], v["measured"], v["errors"]
    return {
        "name": name,
        "ran": True,
        "steps": v.get("steps"),
        "predicted_step_time_s": p["step_time_s"],
        "measured_step_time_s": m["step_time_s"],
        "step_time_error": e["step_time"],
        "step_time_within_target": abs(e["step_time"]) <= STEP_TIME_TARGET,
        "predicted_peak_memory_bytes": p["peak_memory_bytes"],
        "measured_peak_memory_bytes": m["peak_memory_bytes"],
        "peak_memory_error": e["peak_memory"],
        "peak_memory_within_target": abs(e["peak_memory"]) <= MEMORY_TARGET,
        "predicted_breakdown_bytes": p["memory_breakdown_bytes"],
        "measured_breakdown_bytes": m["memory_breakdown_bytes"],
        "predicted_time_by_kind_s": p["time_by_kind_s"],
        "measured_time_by_kind_s": m["time_by_kind_s"],
        "measured_step_times_s": v.get("step_times_s"),
        "calibration": v.get("calibration"),
    }


def pct(x):
    return "n/a" if x is None else f"{100 * x:+.1f} %"


def gib(b):
    return f"{b / 2**30:.2f}"


def markdown(r):
    lines = ["# GPU check", ""]
    lines.append(f"Status: **{r['status']}**; {r['total_seconds']} s in all. "
                 "Every figure below was measured by scripts/gpu-check.sh on this machine.")
    if r.get("calibration") and r["calibration"].get("machine"):
        lines += ["", f"Machine: {r['calibration']['machine']}"]
    lines += ["", "## Steps", "", "| step | status | seconds | note |", "|---|---|---:|---|"]
    for p in r["phases"]:
        lines.append(f"| {p['name']} | {p['status']} | {p['seconds']} | {p['note']} |")
    lines += ["", "## GPU tests", ""]
    if r["tests"]:
        lines += ["| test | status |", "|---|---|"] + [f"| {t['name']} | {t['status']} |" for t in r["tests"]]
    else:
        lines.append("No test results (the build or the test run failed: gpu-check.log).")
    c = r.get("calibration")
    lines += ["", "## Calibration (strata calibrate --backend cuda --quick)", ""]
    if c:
        for d, t in sorted(c["gemm_peak_tflops"].items()):
            lines.append(f"- GEMM {d}: best {t:.1f} TFLOP/s")
        lines.append(f"- HBM triad: best {c['hbm_GBps']} GB/s; pinned copies h2d {c['h2d_pinned_GBps']} GB/s, "
                     f"d2h {c['d2h_pinned_GBps']} GB/s")
        lines.append(f"- collective table written: {c['collectives']}")
    else:
        lines.append("Not calibrated (gpu-check.log says why); the validations used the bundled estimates.")
    lines += ["", f"## GEMMs in the training step (plain scenario, fp32; target: the large ones at "
              f">= {GEMM_TARGET:.0%} of the calibrated fp32 peak)", ""]
    g = r["step_gemms"]
    if g:
        f = g["large_fraction_of_calibrated_fp32_peak"]
        lines.append(f"Products of 10 GFLOP or more: {g['large_tflops']:.1f} TFLOP/s in the step, "
                     f"{'n/a' if f is None else f'{100 * f:.0f} %'} of the calibrated peak "
                     f"({'met' if r['step_gemm_target_met'] else 'not met'}); they take "
                     f"{100 * g['large_fraction_of_gemm_time']:.0f} % of the step's GEMM time "
                     f"({g['gemm_s']:.3f} s of a {g['step_s']:.3f} s step).")
        lines += ["", "| m | n | k | batch | calls | GFLOP | TFLOP/s in step | of peak | TFLOP/s alone |",
                  "|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
        for s in sorted(g["shapes"], key=lambda s: -s["gflop"] * s["calls"]):
            fr = s["in_step_fraction_of_peak"]
            lines.append(f"| {s['m']} | {s['n']} | {s['k']} | {s['batch']} | {s['calls']} | {s['gflop']:.1f} | "
                         f"{s['in_step_tflops']:.1f} | {'n/a' if fr is None else f'{100 * fr:.0f} %'} | "
                         f"{s['alone_tflops']:.1f} |")
    else:
        lines.append("Not measured.")
    lines += ["", f"## Predicted against measured (targets: step time within {STEP_TIME_TARGET:.0%}, "
              f"peak memory within {MEMORY_TARGET:.0%})", "",
              "| scenario | predicted s | measured s | error | met | predicted peak GiB | measured peak GiB | error | met |",
              "|---|---:|---:|---:|---|---:|---:|---:|---|"]
    for s in r["scenarios"]:
        if not s["ran"]:
            lines.append(f"| {s['name']} | | | | not run | | | | not run |")
            continue
        lines.append(
            f"| {s['name']} | {s['predicted_step_time_s']:.4f} | {s['measured_step_time_s']:.4f} | "
            f"{pct(s['step_time_error'])} | {'yes' if s['step_time_within_target'] else 'no'} | "
            f"{gib(s['predicted_peak_memory_bytes'])} | {gib(s['measured_peak_memory_bytes'])} | "
            f"{pct(s['peak_memory_error'])} | {'yes' if s['peak_memory_within_target'] else 'no'} |")
    for s in r["scenarios"]:
        if not s["ran"]:
            continue
        lines += ["", f"### {s['name']}: time by task kind (s per step) and memory by tag (GiB)", "",
                  "| kind | predicted | measured |", "|---|---:|---:|"]
        for k, v in s["predicted_time_by_kind_s"].items():
            mv = s["measured_time_by_kind_s"].get(k, 0)
            if v or mv:
                lines.append(f"| {k} | {v:.4f} | {mv:.4f} |")
        lines += ["", "| tag | predicted | measured |", "|---|---:|---:|"]
        for k, v in s["predicted_breakdown_bytes"].items():
            mv = s["measured_breakdown_bytes"].get(k, 0)
            if v or mv:
                lines.append(f"| {k} | {gib(v)} | {gib(mv)} |")
    return "\n".join(lines) + "\n"


def main():
    out, work, names = sys.argv[1], sys.argv[2], sys.argv[3:]
    ph = phases(work)
    total = next((p["seconds"] for p in ph if p["name"] == "total"), None)
    ph = [p for p in ph if p["name"] != "total"]
    cal = calibration(out)
    fp32_peak = (cal or {}).get("gemm_peak_tflops", {}).get("fp32")
    gemms = step_gemms(out, fp32_peak)
    gemm_met = bool(gemms) and (gemms["large_fraction_of_calibrated_fp32_peak"] or 0) >= GEMM_TARGET
    tst = tests(work)
    # Skipped: what needs two GPUs (or MPI) on a machine without them.
    ok = (all(p["status"] in ("ok", "skipped") for p in ph) and bool(tst)
          and all(t["status"] in ("passed", "skipped") for t in tst))
    report = {
        "status": "ok" if ok else "failed",
        "total_seconds": total,
        "phases": ph,
        "tests": tst,
        "calibration": cal,
        "step_gemms": gemms,
        "step_gemm_target_met": gemm_met,
        "scenarios": [scenario(out, n) for n in names],
        "targets": {"step_gemm_fraction_of_peak": GEMM_TARGET, "step_time_error": STEP_TIME_TARGET,
                    "peak_memory_error": MEMORY_TARGET},
    }
    with open(os.path.join(out, "gpu-report.json"), "w") as f:
        json.dump(report, f, indent=2)
        f.write("\n")
    with open(os.path.join(out, "gpu-report.md"), "w") as f:
        f.write(markdown(report))
    print(f"gpu-report: {report['status']}")


if __name__ == "__main__":
    main()
