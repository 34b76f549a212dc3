#!/usr/bin/env python3
"""strata fit-convergence --quick end to end (no timing).

Usage: check_fit.py STRATA TINY_FIT_SCENARIO

- the quick fit writes the fitted file and the plot, prints the same JSON
  with --format json, measures 4 batch sizes with one held out, and gives the
  same bytes on a second run and with --refit of its measurements;
- a scenario naming the fitted file with its target loss simulates, and its
  steps_to_target is S_min (1 + B_noise/B) rounded up;
- bad options are exit 2 with the rule on stderr and no file written;
- a signal mid-fit drops the run in flight and writes the fit of the runs
  finished (with a note), or nothing when they cannot be fitted; exit 128 +
  the signal.
"""
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile


def check(cond, msg):
    if not cond:
        sys.exit("FAILED: " + msg)


def run(*args, code=0):
    p = subprocess.run([STRATA, *args], capture_output=True, text=True)
    check(p.returncode == code, f"{' '.join(args)}: exit {p.returncode}, expected {code}\n{p.stderr}")
    return p


def main():
    tmp = tempfile.mkdtemp(prefix="strata-e2e-fit-")
    try:
        out, plot = os.path.join(tmp, "fit.json"), os.path.join(tmp, "fit.svg")
        p = run("fit-convergence", SCENARIO, "--quick", "--lr", "0.01", "--out", out, "--plot", plot,
                "--format", "json")
        with open(out) as f:
            text = f.read()
        check(p.stdout == text, "--format json prints the file written")
        fit = json.loads(text)
        check(fit["S_min_steps"]["value"] > 0 and fit["B_noise_tokens"]["value"] >= 0, "fitted S_min and B_noise")
        check("fit-convergence" in fit["S_min_steps"]["source"], "the fitted values say where they come from")
        points = fit["fit"]["points"]
        check(len({q["batch"] for q in points}) == 4, "4 batch sizes measured")
        check(any(q["held_out"] and q["error"] is not None for q in points), "a held-out point with its error")
        check(len(fit["measurements"]) == sum(q["runs"] for q in points), "one measurement per run")
        with open(plot) as f:
            svg = f.read()
        check("<svg" in svg and "polyline" in svg, "the plot has the fitted curve")

        again = os.path.join(tmp, "again.json")
        run("fit-convergence", SCENARIO, "--quick", "--lr", "0.01", "--out", again)
        with open(again) as f:
            check(f.read() == text, "a second fit gives the same file")

        # A scenario using the fit: steps_to_target = ceil(S_min (1 + B_noise/B)).
        with open(SCENARIO) as f:
            lines = [l for l in f if not l.lstrip().startswith("//")]
        sc = json.loads("".join(lines))
        sc["goal"] = {"target_loss": fit["target_loss"]}
        sc["convergence"] = out
        path = os.path.join(tmp, "goal.json")
        with open(path, "w") as f:
            json.dump(sc, f)
        sim = json.loads(run("simulate", path, "--format", "json").stdout)
        b = sc["batch"]["global"] * sc["model"]["seq_len"]
        want = math.ceil(fit["S_min_steps"]["value"] * (1 + fit["B_noise_tokens"]["value"] / b) - 1e-9)
        check(sim["steps_to_target"] == want, f"steps_to_target {sim['steps_to_target']}, expected {want}")
        check(abs(sim["time_to_train_s"] - want * sim["step_time_s"]) <= 1e-9 * sim["time_to_train_s"],
              "time_to_train_s = steps x step time")

        # --refit fits the same measurements again, without training: the same file.
        refit = os.path.join(tmp, "refit.json")
        run("fit-convergence", SCENARIO, "--refit", out, "--out", refit)
        with open(refit) as f:
            check(f.read() == text, "--refit of the file's measurements gives the same file")

        table = run("fit-convergence", SCENARIO, "--quick", "--lr", "0.01", "--out", os.path.join(tmp, "t.json")).stdout
        check("held-out error" in table and "S_min" in table, "the table names the fit and its held-out error")

        bad = os.path.join(tmp, "bad.json")
        for args, rule in [
            (["--held-out", "3"], "--held-out: 3 is not one of --batches"),
            (["--settings", "zip"], "--settings: \"zip\": unknown setting"),
            (["--batches", "4,8", "--held-out", "8"], "--held-out: leaves fewer than two batch sizes to fit"),
        ]:
            p = run("fit-convergence", SCENARIO, "--quick", "--out", bad, *args, code=2)
            check(rule in p.stderr, f"{args}: expected {rule!r} on stderr, got {p.stderr!r}")
            check(not os.path.exists(bad), f"{args}: nothing written")
        # SIGINT/SIGTERM end the training at the next step, dropping the run
        # in flight. A run that never reaches its target (a rate 1e4 times too
        # small, capped at 1000x the baseline's steps) is in flight once the
        # four baseline runs are logged: those four are fitted and written,
        # with a note, and the exit is 128 + the signal.
        import signal
        import time
        stopped = os.path.join(tmp, "stopped.json")
        p = subprocess.Popen([STRATA, "fit-convergence", SCENARIO, "--quick", "--lr", "0.01", "--settings",
                              "topk:0.01:noef@0.0001", "--setting-cap", "1000", "--max-steps", "10000000",
                              "--out", stopped, "--format", "json"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        err = []
        for line in p.stderr:
            err.append(line)
            if line.startswith("fit-convergence: none, batch 32"):
                p.send_signal(signal.SIGTERM)
                break
        out, rest = p.communicate(timeout=120)
        err = "".join(err) + rest
        check(p.returncode == 143, f"SIGTERM mid-fit: exit {p.returncode}, expected 143: {err}")
        check("stopped (dropped)" in err and "stopped by signal 15" in err, err)
        with open(stopped) as f:
            check(f.read() == out, "a stopped fit prints the file it wrote")
        j = json.loads(out)
        check(len(j["measurements"]) == 4 and all(m["setting"] == "none" for m in j["measurements"]),
              f"the four baseline runs measured: {j['measurements']}")
        check(any("stopped by signal 15 after 4 runs" in n for n in j["fit"]["notes"]), "a note says it stopped")
        # Stopped before two batch sizes finished (a rate so small that the
        # first run never reaches its target): nothing can be fitted, nothing
        # is written.
        nothing = os.path.join(tmp, "nothing.json")
        p = subprocess.Popen([STRATA, "fit-convergence", SCENARIO, "--quick", "--lr", "1e-8",
                              "--max-steps", "10000000", "--out", nothing],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        time.sleep(1)
        p.send_signal(signal.SIGINT)
        out, err = p.communicate(timeout=120)
        check(p.returncode == 130, f"SIGINT: exit {p.returncode}, expected 130: {err}")
        check(out == "" and "cannot be fitted" in err and "nothing written" in err, err)
        check(not os.path.exists(nothing), "nothing written when the runs cannot be fitted")

        print(f"fit-convergence: S_min {fit['S_min_steps']['value']}, B_noise {fit['B_noise_tokens']['value']} "
              f"tokens, held-out error {fit['fit']['held_out_error']['max']}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    STRATA, SCENARIO = (os.path.abspath(a) for a in sys.argv[1:3])
    main()
