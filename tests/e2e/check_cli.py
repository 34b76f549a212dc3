#!/usr/bin/env python3
"""End-to-end checks of the strata CLI on bundled presets and scenarios.

Each check states the closed form it expects. Usage: check_cli.py STRATA CHECK
"""
import csv
import io
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile


def run(strata, *args):
    p = subprocess.run([strata, *args], capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"{' '.join(args)}: exit {p.returncode}\n{p.stderr}")
    return p.stdout


def check(cond, msg):
    if not cond:
        sys.exit("FAILED: " + msg)


def describe_json(strata):
    # GPT-3 175B: params = Megatron Eq. 2 + the final layer norm (2h);
    # flops_per_token = Korthikanti Eq. 7 / (B·s) with B = 1.
    d = json.loads(run(strata, "describe", "gpt3-175b", "--format", "json"))
    l, h, V, s = 96, 12288, 51200, 2048
    eq2 = 12 * l * h * h + 13 * l * h + (V + s) * h
    check(d["params"] == eq2 + 2 * h, f"params {d['params']} != {eq2 + 2 * h}")
    eq7 = 72 * l * s * h * h * (1 + s / (6 * h) + V / (12 * h * l)) / s
    check(abs(d["flops_per_token"] - eq7) / eq7 < 1e-12, f"flops/token {d['flops_per_token']} != {eq7}")
    names = [layer["name"] for layer in d["layers"]]
    check(names[0] == "embedding" and names[-1] == "head" and len(names) == l + 2,
          f"layers {names[:3]}…{names[-2:]} ({len(names)})")
    op = d["layers"][1]["ops"][0]
    check(set(op) == {"op", "params", "fwd_flops", "bwd_flops", "saved_bytes"}, f"op keys {set(op)}")
    total = sum(o["params"] for layer in d["layers"] for o in layer["ops"])
    check(total == d["params"], "per-op params do not sum to params")


def describe_scenario(strata):
    # A scenario describes its model at its microbatch: 8 sequences of 1024.
    d = json.loads(run(strata, "describe", sys.argv[3], "--format", "json"))
    check(d["tokens"] == 8 * 1024, f"tokens {d['tokens']}")
    check(d["scenario"]["microbatches"] == 4, "32 sequences / (dp 1 · micro 8) = 4 microbatches")


def lists(strata):
    # 23 transformer and 4 layer-chain model, 7 GPU and 4 + 7 cluster presets, in every format.
    for cmd, n in (("models", 27), ("gpus", 8), ("clusters", 13)):
        j = json.loads(run(strata, cmd, "--format", "json"))
        check(len(j) == n, f"{cmd}: {len(j)} presets, expected {n}")
        rows = list(csv.reader(io.StringIO(run(strata, cmd, "--format", "csv"))))
        check(len(rows) == n + 1, f"{cmd} csv: {len(rows)} rows")
        table = run(strata, cmd).splitlines()
        check(len(table) == n + 2, f"{cmd} table: {len(table)} lines")
    stacks = json.loads(run(strata, "stacks", "--format", "json"))
    check(len(stacks) == 9, f"stacks: {len(stacks)}, expected 9 (configs/stacks)")
    check(all(st["source"] for s in stacks for st in s["settings"].values()), "a stack setting without a source")
    names = {m["name"] for m in json.loads(run(strata, "models", "--format", "json"))}
    check({"gpt3-175b", "llama3-405b", "mixtral-8x7b", "megatron-1t", "resnet50", "resnet1001",
           "vgg19", "unet"} <= names, "missing presets")


def hf_config(strata):
    # A Hugging Face config.json describes like the equivalent preset.
    hf = json.loads(run(strata, "describe", sys.argv[3], "--format", "json"))
    preset = json.loads(run(strata, "describe", "llama3-8b", "--format", "json"))
    check(hf["params"] == preset["params"], f"{hf['params']} != {preset['params']}")


def simulate_json(strata):
    # The public contract: feasible, peak_memory_bytes, memory_breakdown_bytes
    # (summing to the peak), one entry per pipeline stage, host memory.
    d = json.loads(run(strata, "simulate", sys.argv[3], "--format", "json"))
    for key in ("feasible", "peak_memory_bytes", "memory_breakdown_bytes", "memory_per_stage",
                "host_memory_bytes"):
        check(key in d, f"missing {key}")
    check(d["feasible"] is True, "the bundled 175B scenario fits")
    check(sum(d["memory_breakdown_bytes"].values()) == d["peak_memory_bytes"], "breakdown sums to peak")
    check(len(d["memory_per_stage"]) == 8, "pp 8 stages")
    check(max(s["peak_bytes"] for s in d["memory_per_stage"]) == d["peak_memory_bytes"], "peak = max stage")
    tags = set(d["memory_breakdown_bytes"])
    check({"params", "grads", "optimizer_states", "activations", "comm_buffers", "workspace",
           "allocator_reserve"} <= tags, f"tags {tags}")
    # Step time and its breakdown on the critical stage, summing to the step.
    for key in ("step_time_s", "tokens_per_s_per_gpu", "model_tflops_per_gpu",
                "hardware_tflops_per_gpu", "mfu", "time_breakdown_s", "bubble_fraction"):
        check(key in d, f"missing {key}")
    b = d["time_breakdown_s"]
    total = b["compute"] + b["recompute"] + b["bubble"] + b["offload_stall"] + b["optimizer"] + \
        sum(b["exposed_comm"].values())
    check(abs(total - d["step_time_s"]) <= 1e-9 * d["step_time_s"] + 1e-9, f"breakdown {total} != {d['step_time_s']}")
    check(set(b["exposed_comm"]) == {"dp", "tp", "pp", "cp", "ep", "offload"}, f"{b['exposed_comm']}")
    check(0 < d["mfu"] < 1, f"mfu {d['mfu']}")
    # Selective recompute under flash attention is said to be no recompute.
    check(any('"selective" is "none"' in n for n in d.get("notes", [])), f"notes {d.get('notes')}")
    # The analytical model agrees with the replayed timeline on this plan.
    a = json.loads(run(strata, "simulate", sys.argv[3], "--analytical", "--format", "json"))
    check(a["peak_memory_bytes"] == d["peak_memory_bytes"], "analytical != timeline")


def simulate_stragglers(strata):
    scenario = sys.argv[3]
    # The bundled stragglers scenario: its one slow GPU (factor 1.2) sets the
    # only stage's factor; the distribution's order statistics are ordered;
    # backup replicas drop their gradients, (dp - k)/dp of the batch; the
    # same seed gives the same figures; the backends refuse it.
    sc = json.loads(re.sub(r"^\s*//.*$", "", open(scenario).read(), flags=re.M))
    out = run(strata, "simulate", scenario, "--format", "json")
    j = json.loads(out)
    check(j["stage_slowdown"] == [1.2], f"stage_slowdown {j['stage_slowdown']}")
    s = j["stragglers"]
    check(s["samples"] == 200 and s["seed"] == 1, f"samples/seed {s['samples']} {s['seed']}")
    check(s["nominal_s"] == j["step_time_s"], f"nominal {s['nominal_s']} != step {j['step_time_s']}")
    check(s["p50_s"] <= s["p90_s"] <= s["p99_s"] <= s["max_s"], f"percentiles {s}")
    dp = j["gpus"]
    k = sc["cluster"]["stragglers"]["backup_replicas"]
    b = s["with_backup"]
    check(s["backup_replicas"] == k and b["batch_global"] == sc["batch"]["global"] // dp * (dp - k),
          f"backup {b}")
    check(b["mean_s"] <= s["mean_s"] and b["p99_s"] <= s["p99_s"], f"backup waits longer: {b} {s}")
    check(run(strata, "simulate", scenario, "--format", "json") == out, "the same seed gave other figures")
    p = subprocess.run([strata, "run", scenario, "--backend", "cpu", "--steps", "1"], capture_output=True, text=True)
    check(p.returncode == 2 and "cluster.slow" in p.stderr, f"run: exit {p.returncode}: {p.stderr}")
    # A directory explored with one slow GPU is not resumed with another factor:
    # every record's step depends on it (the manifest names cluster.slow).
    base = os.path.join(os.path.dirname(os.path.abspath(__file__)), "scenarios", "gpt2-124m-explore.json")
    ex = json.loads(re.sub(r"^\s*//.*$", "", open(base).read(), flags=re.M))
    tmp = tempfile.mkdtemp(prefix="strata-e2e-slow-")
    try:
        paths = []
        for f in (1.5, 1.7):
            ex["cluster"] = {"preset": "dgx-h100", "slow": [{"rank": 0, "factor": f}]}
            paths.append(os.path.join(tmp, f"s{f}.json"))
            with open(paths[-1], "w") as fh:
                json.dump(ex, fh)
        out_dir = os.path.join(tmp, "out")
        run(strata, "explore", paths[0], "--out", out_dir, "--jobs", "1", "--quiet")
        p = subprocess.run([strata, "explore", paths[1], "--out", out_dir, "--resume", "--quiet"],
                           capture_output=True, text=True)
        check(p.returncode == 2 and "cluster.slow" in p.stderr, f"resume: exit {p.returncode}: {p.stderr}")
    finally:
        shutil.rmtree(tmp)


def hetero_cluster(strata):
    # The bundled cluster of node groups (4 DGX A100 + 4 DGX-1 V100): simulate
    # names each stage's GPUs and checks each against its own memory; over a
    # small space the explorer's best plan beats the best on the A100 nodes
    # alone and every plan that splits the blocks evenly over all eight
    # (issue 22's targets); the report's timeline names the GPUs; a directory
    # explored on these groups is not resumed with others; the backends refuse it.
    scenario = sys.argv[3]
    sc = json.loads(re.sub(r"^\s*//.*$", "", open(scenario).read(), flags=re.M))
    j = json.loads(run(strata, "simulate", scenario, "--format", "json"))
    stages = j["memory_per_stage"]
    check([s["gpus"] for s in stages] == ["a100-80g (dgx-a100-80g)", "v100-32g (dgx-1)"], f"gpus {stages}")
    check([s["gpu_memory_bytes"] for s in stages] == [80 * 2**30, 32 * 2**30], f"capacities {stages}")
    check(all(s["peak_bytes"] <= s["gpu_memory_bytes"] for s in stages) and j["feasible"], "the plan fits")
    check(stages[0]["layer_keeps"].count("A") > stages[1]["layer_keeps"].count("A"),
          f"gpu_speed gives the A100 stage more blocks: {stages}")
    table = run(strata, "simulate", scenario)
    check("64 GPUs: 32 x a100-80g (dgx-a100-80g) + 32 x v100-32g (dgx-1)" in table, "the table names the groups")
    tmp = tempfile.mkdtemp(prefix="strata-e2e-hetero-")
    try:
        sc["space"] = {"tp": [1, 2], "pp": [1, 2, 4], "zero": [1, 2, 3], "schedule": ["1f1b", "interleaved:2"],
                       "pipeline_layout": ["balanced", "gpu_speed"], "recompute": ["none", "selective", "full"]}
        sc["plan"] = {"precision": "fp16", "optimizer": "adam"}
        alone = dict(sc, cluster={"preset": "dgx-a100-80g", "nodes": 4})
        best = {}
        for name, s in (("hetero", sc), ("a100", alone)):
            path = os.path.join(tmp, name + ".json")
            with open(path, "w") as fh:
                json.dump(s, fh)
            out = os.path.join(tmp, name)
            run(strata, "explore", path, "--out", out, "--jobs", "1", "--quiet")
            best[name] = json.load(open(os.path.join(out, "summary.json")))["top"][0]["step_time_s"]
        uniform = min(json.loads(l)["step_time_s"] for l in open(os.path.join(tmp, "hetero", "results.jsonl"))
                      if json.loads(l).get("feasible") and
                      json.loads(l)["plan"].get("pipeline_layout", "balanced") == "balanced")
        check(best["hetero"] <= best["a100"], f"hetero best {best['hetero']} slower than the A100s alone {best['a100']}")
        check(best["hetero"] < uniform, f"hetero best {best['hetero']} not faster than the best even split {uniform}")
        md = open(os.path.join(tmp, "hetero", "report.md")).read()
        check("v100-32g (dgx-1)" in md, "the report names the V100 stage's GPUs")
        # Two shards merge into the same best plan, the groups named in the summary.
        path = os.path.join(tmp, "hetero.json")
        for i in (0, 1):
            run(strata, "explore", path, "--out", os.path.join(tmp, f"shard{i}"), "--shard", f"{i}/2", "--quiet")
        run(strata, "merge", os.path.join(tmp, "shard0"), os.path.join(tmp, "shard1"), "--out", os.path.join(tmp, "m"))
        merged = json.load(open(os.path.join(tmp, "m", "summary.json")))
        check(merged["top"][0]["step_time_s"] == best["hetero"], f"merged best {merged['top'][0]['step_time_s']}")
        check(merged["cluster_gpus"].startswith("64 GPUs: 32 x a100-80g"), f"merged summary {merged.get('cluster_gpus')}")
        sc["cluster"]["groups"][1]["nodes"] = 3
        sc["cluster"]["groups"][0]["nodes"] = 5
        other = os.path.join(tmp, "other.json")
        with open(other, "w") as fh:
            json.dump(sc, fh)
        p = subprocess.run([strata, "explore", other, "--out", os.path.join(tmp, "hetero"), "--resume", "--quiet"],
                           capture_output=True, text=True)
        check(p.returncode == 2 and "cluster.groups" in p.stderr, f"resume: exit {p.returncode}: {p.stderr}")
    finally:
        shutil.rmtree(tmp)
    p = subprocess.run([strata, "run", scenario, "--backend", "cpu", "--steps", "1"], capture_output=True, text=True)
    check(p.returncode == 2 and "cluster.groups" in p.stderr, f"run: exit {p.returncode}: {p.stderr}")


def simulate_infeasible(strata):
    # An out-of-memory plan exits 0 with feasible false and the numbers.
    d = json.loads(run(strata, "simulate", sys.argv[3], "--format", "json"))
    check(d["feasible"] is False, "175B with plain DP on 8 GPUs must not fit")
    r = d["infeasible_reason"]
    check(r["pool"] == "gpu" and r["has_bytes"] == 80 * 2**30 and r["needs_bytes"] > 16 * 174e9,
          f"reason {r}")
    table = run(strata, "simulate", sys.argv[3])
    check("DOES NOT FIT" in table and "has 80.00 GiB" in table, "table says it does not fit")
    check(d["step_time_s"] > 0, "an infeasible plan still reports every field it can")


def simulate_trace(strata):
    # --trace writes a Chrome trace: JSON with one track per resource.
    import tempfile, os
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "t.json")
        run(strata, "simulate", sys.argv[3], "--trace", path)
        events = json.load(open(path))
        events = events["traceEvents"] if isinstance(events, dict) else events
        names = {e["args"]["name"] for e in events if e.get("ph") == "M" and e.get("name") == "thread_name"}
        procs = {e["args"]["name"] for e in events if e.get("ph") == "M" and e.get("name") == "process_name"}
        check({"compute", "comm", "p2p"} <= names and "s0" in procs, f"tracks {sorted(names)} in {sorted(procs)}")
        check(any(e.get("ph") == "X" for e in events), "no task events")


def validate_published(strata):
    # Counted cases become rows with a prediction and an error; a case with
    # no stated layout (ZeRO-100B) is not a row; a row whose settings Strata
    # cannot express (torchtitan's memory_budget checkpointing) is listed,
    # not counted. MAPE is the mean error of the counted rows, and faster_pct is
    # the error with a sign: + when the prediction is faster than measured
    # (shorter step time, higher throughput).
    d = json.loads(run(strata, "validate-published", sys.argv[3], "--format", "json"))
    ids = [c["id"] for c in d["cases"]]
    check(ids == ["KOR22-22B/full-recompute", "KOR22-22B/selective+sp",
                  "DLPERF-MEGATRON-MP_1x1x1_8_768x12", "TITAN-A100-Llama2-13B-bs2-none",
                  "TITAN-A100-Llama2-13B-bs2-selective_op", "TITAN-A100-Llama2-13B-bs2-memory_budget"],
          f"rows {ids}")
    counted = [c for c in d["cases"] if c["counted"]]
    check(len(counted) == 5 and d["counted"] == 5, "five counted rows")
    for c in counted:
        check(c["predicted"] is not None and c["predicted"] > 0, f"{c['id']}: {c['note']}")
        check(abs(c["error_pct"] - 100 * abs(c["predicted"] - c["measured"]) / c["measured"]) < 1e-9, "error")
        faster = c["predicted"] < c["measured"] if c["metric"] == "step_time_s" else c["predicted"] > c["measured"]
        check(abs(c["faster_pct"]) == c["error_pct"] and (c["faster_pct"] > 0) == faster,
              f"{c['id']}: sign of faster_pct {c['faster_pct']}")
    skipped = d["cases"][-1]
    check(not skipped["counted"] and skipped["predicted"] is None and skipped["error_pct"] is None
          and "memory_budget" in skipped["note"], f"uncounted row {skipped}")
    mean = sum(c["error_pct"] for c in counted) / len(counted)
    check(abs(d["mape_pct"] - mean) < 1e-9, "mape is the mean error")
    bias = sum(c["faster_pct"] for c in counted) / len(counted)
    check(abs(d["faster_pct"] - bias) < 1e-9, "faster_pct is the mean signed error")


def validate_llm_foundry(strata):
    # The project's transcription of MosaicML's llm-foundry tables
    # (validation/llm-foundry-mpt.json): 191 bf16 and 10 fp8 runs, every one
    # of which trained, so every one must be predicted to fit (a row
    # predicted out of memory has no prediction) and be counted.
    d = json.loads(run(strata, "validate-published", sys.argv[3], "--format", "json"))
    check(d["counted"] == 201 and len(d["cases"]) == 201, f"{d['counted']} counted of {len(d['cases'])}")
    for c in d["cases"]:
        check(c["counted"] and c["predicted"] is not None and c["predicted"] > 0, f"{c['id']}: {c['note']}")
    check(list(d["mape_pct_by_family"]) == ["MOSAIC"], f"families {list(d['mape_pct_by_family'])}")


def validate_dlperf(strata):
    # DLPerf's whole Megatron-LM table (validation/dlperf-megatron.json): 18
    # runs, each counted with a prediction (all fit V100-16GB), among them the
    # tensor-parallel groups across nodes (tp 16 and 32).
    d = json.loads(run(strata, "validate-published", sys.argv[3], "--format", "json"))
    check(d["counted"] == 18 and len(d["cases"]) == 18, f"{d['counted']} counted of {len(d['cases'])}")
    for c in d["cases"]:
        check(c["counted"] and c["predicted"] is not None and c["predicted"] > 0, f"{c['id']}: {c['note']}")


def validate_megatron_2019(strata):
    # Megatron-LM 2019's scaling studies (validation/megatron-2019.json): 13
    # rows on DGX-2H V100s under the megatron-lm-2019 stack, each counted
    # with a prediction; a row's throughput relative to the single-GPU row
    # is what its scaling figure says, so the strong-scaling rows (the 1.2B
    # model on 2, 4 and 8 GPUs) must come out slower per GPU the more GPUs
    # share the same work.
    d = json.loads(run(strata, "validate-published", sys.argv[3], "--format", "json"))
    check(d["counted"] == 13 and len(d["cases"]) == 13, f"{d['counted']} counted of {len(d['cases'])}")
    for c in d["cases"]:
        check(c["counted"] and c["predicted"] is not None and c["predicted"] > 0, f"{c['id']}: {c['note']}")
    pred = {c["id"]: c["predicted"] for c in d["cases"]}
    strong = [pred["MEG19-MP-1.2B-1gpu"]] + [pred[f"MEG19-STRONG-1.2B-{n}gpu"] for n in (2, 4, 8)]
    check(all(a > b for a, b in zip(strong, strong[1:])), f"per-GPU throughput over 1, 2, 4, 8 GPUs: {strong}")


def measured_calibration(strata):
    # A scenario naming no calibration uses the one cached for its GPU
    # (`strata calibrate` writes it with the GPU it measured); a cached file
    # for another GPU is not used. The cached file here halves every GEMM
    # efficiency of the bundled a100-80g curves: the GEMM-bound step must
    # get slower, and the output must say which file it used.
    scenario, source_root = sys.argv[3], sys.argv[4]
    tmp = tempfile.mkdtemp(prefix="strata-e2e-cal-")
    try:
        env = dict(os.environ, XDG_CACHE_HOME=tmp)
        os.makedirs(os.path.join(tmp, "strata"))
        text = open(os.path.join(source_root, "configs/calibration/a100-80g.json")).read()
        cal = json.loads(re.sub(r"//.*", "", text))
        for dt in cal["gemm"].values():
            for p in dt["points"]:
                for k in list(p):
                    if k not in ("m", "n", "k"):
                        p[k] = p[k] / 2
        cal["backend"] = "cpu"

        def simulate(gpu):
            cal["gpu"] = gpu
            with open(os.path.join(tmp, "strata", "cpu-calibration.json"), "w") as f:
                json.dump(cal, f)
            p = subprocess.run([strata, "simulate", scenario, "--format", "json"], capture_output=True,
                               text=True, env=env)
            check(p.returncode == 0, f"simulate: exit {p.returncode}: {p.stderr}")
            return json.loads(p.stdout)["step_time_s"], p.stderr

        other, other_err = simulate("a100-80g")
        mine, mine_err = simulate("cpu-rank-thread")
        check("calibration:" not in other_err, f"a file for another GPU was used: {other_err}")
        check("cpu-calibration.json" in mine_err, f"the cached file is not named: {mine_err}")
        check(mine > other, f"halved GEMM efficiency: step {mine} s, not slower than {other} s")
    finally:
        shutil.rmtree(tmp)


def input_bounds(strata):
    # Paths the system cannot follow and --data files that are not a corpus
    # are bad input: exit 2, one message naming the file, nothing on stdout.
    tmp = tempfile.mkdtemp(prefix="strata-e2e-bounds-")
    try:
        # The bundled tiny scenario with a byte-level vocabulary (--data needs 256).
        scenario = os.path.join(tmp, "bytes.json")
        with open(sys.argv[3]) as f, open(scenario, "w") as out:
            out.write(f.read().replace('"vocab": 16', '"vocab": 256'))
        loop = os.path.join(tmp, "loop.json")
        os.symlink(loop, loop)
        fifo = os.path.join(tmp, "fifo")
        os.mkfifo(fifo)
        short = os.path.join(tmp, "short.txt")
        with open(short, "w") as f:
            f.write("abc")
        cases = [
            (["simulate", loop], loop),
            (["run", scenario, "--backend", "cpu", "--steps", "1", "--data", fifo], "not a regular file"),
            (["run", scenario, "--backend", "cpu", "--steps", "1", "--data", tmp], "is a directory"),
            (["run", scenario, "--backend", "cpu", "--steps", "1", "--data", short], "shorter than one training window"),
        ]
        for args, expect in cases:
            p = subprocess.run([strata, *args], capture_output=True, text=True, timeout=60)
            check(p.returncode == 2, f"{' '.join(args)}: exit {p.returncode}, expected 2: {p.stderr}")
            check(expect in p.stderr, f"{' '.join(args)}: {p.stderr!r} does not say {expect!r}")
            check(p.stdout == "", f"{' '.join(args)}: printed {p.stdout!r}")
    finally:
        shutil.rmtree(tmp)


def run_interrupted(strata):
    # SIGINT or SIGTERM during `strata run` ends it after the step in flight:
    # exit 128 + the signal, and the steps measured so far printed in full
    # (the JSON says it stopped, and after how many of the asked steps).
    import signal
    import time
    scenario = sys.argv[3]
    tmp = tempfile.mkdtemp(prefix="strata-e2e-sig-")
    try:
        env = dict(os.environ, XDG_CACHE_HOME=tmp)  # no measuring: the bundled estimates
        for sig, code in ((signal.SIGINT, 130), (signal.SIGTERM, 143)):
            p = subprocess.Popen([strata, "run", scenario, "--backend", "cpu", "--steps", "1000000",
                                  "--format", "json"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                 text=True, env=env)
            time.sleep(4)
            p.send_signal(sig)
            out, err = p.communicate(timeout=120)
            check(p.returncode == code, f"signal {sig}: exit {p.returncode}, expected {code}: {err}")
            j = json.loads(out)
            check(j["stopped"] is True, "the report says it stopped")
            check(1 <= len(j["steps"]) < j["steps_asked"] == 1000000, f"{len(j['steps'])} steps")
            check("stopped by signal" in err, err)
    finally:
        shutil.rmtree(tmp)


def run_explored(strata):
    # run and validate take an explore directory: the plan of its top list's
    # --rank (1 by default) on the explored model and cluster, as export
    # does. --rank with a scenario file is bad input, and so is a rank the
    # top list does not hold.
    with open(sys.argv[3]) as f:
        sc = json.loads("".join(l for l in f if not l.lstrip().startswith("//")))
    for k in ("dp", "pp", "zero"):
        sc["plan"].pop(k, None)
    sc["space"] = {"pp": [1, 2], "zero": [0, 1], "recompute": ["none", "full"]}
    tmp = tempfile.mkdtemp(prefix="strata-e2e-dir-")
    try:
        env = dict(os.environ, XDG_CACHE_HOME=tmp)  # validate measures a quick calibration once
        path, d = os.path.join(tmp, "space.json"), os.path.join(tmp, "explore")
        with open(path, "w") as f:
            json.dump(sc, f)
        run(strata, "explore", path, "--out", d, "--jobs", "1")
        with open(os.path.join(d, "summary.json")) as f:
            top = json.load(f)["top"]
        for rank in (1, 2):
            for cmd in ("run", "validate"):
                p = subprocess.run([strata, cmd, d, "--backend", "cpu", "--steps", "2", "--rank", str(rank),
                                    "--format", "json"], capture_output=True, text=True, env=env)
                if cmd == "validate" and p.returncode == 2 and "cannot measure one" in p.stderr:
                    continue  # a build without Google Benchmark has no calibration to validate with
                check(p.returncode == 0, f"{cmd} DIR --rank {rank}: exit {p.returncode}: {p.stderr}")
                j = json.loads(p.stdout)
                plan = top[rank - 1]["plan"]
                check((j["dp"], j["tp"], j["pp"]) == (plan["dp"], plan["tp"], plan["pp"]),
                      f"{cmd} --rank {rank}: dp/tp/pp {(j['dp'], j['tp'], j['pp'])}, top has {plan}")
                check(f"top[{rank - 1}]" in j["scenario"], f"{cmd}: the report names the plan: {j['scenario']}")
        p = subprocess.run([strata, "run", path, "--backend", "cpu", "--rank", "2"], capture_output=True, text=True)
        check(p.returncode == 2 and "--rank: takes an explore output directory" in p.stderr, p.stderr)
        p = subprocess.run([strata, "run", d, "--backend", "cpu", "--rank", str(len(top) + 1)],
                           capture_output=True, text=True)
        check(p.returncode == 2 and "top: holds" in p.stderr, p.stderr)
    finally:
        shutil.rmtree(tmp)


def out_of_memory(strata):
    # The tiny scenario on a device of 0.001 GiB: the model does not fit where it
    # is placed; on 0.0025 GiB it is placed and a step runs out. Both
    # exit 3 naming the rank, the pool and the bytes, with the memory
    # model's predicted peak beside them; nothing on stdout. A plan with bf16
    # and flash attention is run with a note for each (computed in fp32,
    # standard attention).
    with open(sys.argv[3]) as f:
        sc = json.loads("".join(l for l in f if not l.lstrip().startswith("//")))
    tmp = tempfile.mkdtemp(prefix="strata-e2e-oom-")
    try:
        env = dict(os.environ, XDG_CACHE_HOME=tmp)  # validate measures a quick calibration once
        device = {"name": "tiny-device", "hbm_GBps": 10,
                  "tflops": {"fp32": 0.085, "tf32": 0, "fp16": 0, "bf16": 0, "fp8": 0}}
        for gib, where in ((0.001, "placing the model"), (0.0025, "run: step ")):
            sc["cluster"] = {"preset": "cpu-local", "gpus_per_node": 4, "gpu": dict(device, memory_GiB=gib)}
            path = os.path.join(tmp, "oom.json")
            with open(path, "w") as f:
                json.dump(sc, f)
            for cmd in ("run", "validate"):
                p = subprocess.run([strata, cmd, path, "--backend", "cpu", "--steps", "2"],
                                   capture_output=True, text=True, env=env)
                if cmd == "validate" and p.returncode == 2 and "cannot measure one" in p.stderr:
                    continue  # a build without Google Benchmark has no calibration to validate with
                check(p.returncode == 3, f"{cmd} on {gib} GiB: exit {p.returncode}, expected 3: {p.stderr}")
                check(p.stdout == "", f"{cmd}: nothing on stdout")
                check("out of memory" in p.stderr and "device pool" in p.stderr and
                      "the memory model predicts a peak of" in p.stderr and "internal error" not in p.stderr,
                      f"{cmd} on {gib} GiB: {p.stderr}")
                if cmd == "run":
                    check(where in p.stderr, f"run on {gib} GiB: {where!r} in {p.stderr!r}")
        sc["cluster"] = {"preset": "cpu-local", "gpus_per_node": 4}
        sc["plan"]["precision"] = "bf16"
        sc["plan"]["implementation"] = {"attention": "flash"}
        path = os.path.join(tmp, "bf16.json")
        with open(path, "w") as f:
            json.dump(sc, f)
        p = subprocess.run([strata, "run", path, "--backend", "cpu", "--steps", "1"],
                           capture_output=True, text=True, env=env)
        check(p.returncode == 0, p.stderr)
        notes = [l for l in p.stderr.splitlines() if l.startswith("strata: note: the CPU backend runs this plan otherwise")]
        check(len(notes) == 2 and "computed in fp32" in notes[0] and "standard attention" in notes[1], p.stderr)
    finally:
        shutil.rmtree(tmp)


def output_paths(strata):
    # Outputs are checked before any work, against the inputs too: an
    # output that is an input, or a file in the explore directory read, or
    # a path the writer refuses (a link) is exit 2 with nothing written; an
    # explore directory whose copy is not its manifest's is refused by
    # export and run as by report.
    tiny, explore_scenario, fit_scenario = sys.argv[3], sys.argv[4], sys.argv[5]
    tmp = tempfile.mkdtemp(prefix="strata-e2e-outputs-")
    try:
        t = os.path.join(tmp, "t.json")
        shutil.copy(tiny, t)
        d = os.path.join(tmp, "d")
        run(strata, "explore", explore_scenario, "--out", d)
        summary = os.path.join(d, "summary.json")
        with open(summary) as f:
            summary_text = f.read()
        target = os.path.join(tmp, "target")
        with open(target, "w") as f:
            f.write("mine")
        link = os.path.join(tmp, "link")
        os.symlink(target, link)
        d2 = os.path.join(tmp, "d2")
        os.mkdir(d2)
        os.symlink(target, os.path.join(d2, "report.md"))
        f_json = os.path.join(tmp, "f.json")
        cases = [
            (["simulate", t, "--trace", t], "--trace is the input"),
            (["export", d, "--to", "megatron", "--out", summary], "--out is a file in the directory"),
            (["fit-convergence", fit_scenario, "--quick", "--out", f_json, "--plot", link], "is a symbolic link"),
            (["tradeoff", tiny, "--svg", link], "is a symbolic link"),
            (["calibrate", "--backend", "cpu", "--quick", "--out", link], "is a symbolic link"),
            (["report", d, "--out", d2], "is a symbolic link"),
        ]
        for args, expect in cases:
            p = subprocess.run([strata, *args], capture_output=True, text=True, timeout=60)
            check(p.returncode == 2, f"{' '.join(args)}: exit {p.returncode}, expected 2: {p.stderr}")
            check(expect in p.stderr, f"{' '.join(args)}: {p.stderr!r} does not say {expect!r}")
        with open(t) as a, open(tiny) as b:
            check(a.read() == b.read(), "simulate --trace overwrote its scenario")
        with open(summary) as f:
            check(f.read() == summary_text, "export --out overwrote the summary")
        with open(target) as f:
            check(f.read() == "mine", "a link's target was written")
        check(not os.path.exists(f_json), "fit-convergence wrote --out before refusing --plot")
        check(not os.path.exists(os.path.join(d2, "report.html")), "report wrote report.html before refusing report.md")
        # The scenario copy edited: export and run refuse the directory as report does.
        copy = os.path.join(d, "scenario.json")
        with open(copy) as f:
            text = f.read()
        with open(copy, "w") as f:
            f.write(text.replace('"dgx-h100"', '"dgx-a100-80g"'))
        for args in (["export", d, "--to", "megatron"], ["run", d, "--backend", "cpu", "--steps", "1"],
                     ["report", d]):
            p = subprocess.run([strata, *args], capture_output=True, text=True, timeout=60)
            check(p.returncode == 2, f"{' '.join(args)}: exit {p.returncode}, expected 2: {p.stderr}")
            check("manifest.json: cluster.name" in p.stderr, f"{' '.join(args)}: {p.stderr!r}")
            check(p.stdout == "", f"{' '.join(args)}: printed {p.stdout!r}")
    finally:
        shutil.rmtree(tmp)


def option_errors(strata):
    # A command line the parser refuses: exit 2, nothing on stdout, one line
    # on stderr prefixed like every other error, control characters in the
    # value escaped (\x1b, not the raw byte that recolours a terminal), and
    # the subcommand whose --help lists the options.
    cases = [
        (["simulate", "--granularity", "x\x1b[31mred", sys.argv[3]],
         "strata: error: --granularity: x\\x1b[31mred not in {layer,chunk} (strata simulate --help lists the options)\n"),
        (["simulate"], "strata: error: SCENARIO is required (strata simulate --help lists the options)\n"),
        (["explore", sys.argv[3]], "strata: error: --out is required (strata explore --help lists the options)\n"),
        ([], "strata: error: A subcommand is required (strata --help lists the options)\n"),
    ]
    for args, expect in cases:
        p = subprocess.run([strata, *args], capture_output=True, text=True, timeout=60)
        check(p.returncode == 2, f"{args!r}: exit {p.returncode}, expected 2")
        check(p.stdout == "", f"{args!r}: printed {p.stdout!r}")
        check(p.stderr == expect, f"{args!r}: {p.stderr!r}, expected {expect!r}")


def report_progress(strata):
    # strata report prints its phases on stderr (checking the records, re-
    # scoring the plans the summary shows, re-simulating the best plan, its
    # trade-off), one line each off a terminal; --quiet prints nothing there,
    # explore --quiet neither; stdout is the same either way.
    tmp = tempfile.mkdtemp()
    try:
        d = os.path.join(tmp, "d")
        p = subprocess.run([strata, "explore", sys.argv[3], "--out", d, "--quiet"], capture_output=True, text=True,
                           timeout=300)
        check(p.returncode == 0 and p.stderr == "", f"explore --quiet: exit {p.returncode}, stderr {p.stderr!r}")
        # explore's own report (of the records it has just written, read but
        # not verified again) is the one `strata report` writes after
        # verifying them.
        own = {f: open(os.path.join(d, f), "rb").read() for f in ("report.html", "report.md", "results.csv")}
        loud = subprocess.run([strata, "report", d], capture_output=True, text=True, timeout=300)
        for f, data in own.items():
            check(open(os.path.join(d, f), "rb").read() == data, f"strata report rewrote {f} otherwise than explore")
        quiet = subprocess.run([strata, "report", d, "--quiet"], capture_output=True, text=True, timeout=300)
        check(loud.returncode == 0 and quiet.returncode == 0, f"report: {loud.stderr!r} {quiet.stderr!r}")
        check(quiet.stderr == "", f"report --quiet wrote {quiet.stderr!r}")
        check(loud.stdout == quiet.stdout, "report's stdout depends on --quiet")
        lines = loud.stderr.splitlines()
        for phase in ("report: checking " + os.path.join(d, "results.jsonl") + ": 100 %",
                      "report: re-scoring ", "report: re-simulating the best plan ",
                      "report: the recompute trade-off of the best plan"):
            check(any(l.startswith(phase) for l in lines), f"no {phase!r} line in {lines!r}")
    finally:
        shutil.rmtree(tmp)


if __name__ == "__main__":
    globals()[sys.argv[2]](sys.argv[1])
