#!/usr/bin/env python3
"""End-to-end checks of `strata export` (docs/export.md).

Usage: check_export.py STRATA SOURCE_DIR. Exports the bundled scenarios to
each engine and the top plans of a small explore run (tests/e2e/scenarios/
gpt2-124m-explore.json), and checks the flags and keys by their documented
names (Megatron-LM megatron/training/arguments.py, DeepSpeed config-json,
torchtitan job_config.py).
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import tomllib


def run(*args, rc=0):
    p = subprocess.run([STRATA, *args], capture_output=True, text=True)
    if rc is not None and p.returncode != rc:
        sys.exit(f"{' '.join(args)}: exit {p.returncode}, expected {rc}\n{p.stdout[:2000]}\n{p.stderr}")
    return p


def check(cond, msg):
    if not cond:
        sys.exit("FAILED: " + msg)


def flags(text):
    """Megatron-LM flags of an export: {flag: value or True}, comments dropped."""
    out = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        line = line.removesuffix(" \\")
        name, _, value = line.partition(" ")
        check(name not in out, f"{name} given twice")
        out[name] = value if value else True
    return out


def scenario(name):
    return os.path.join(SOURCE, "configs", "scenarios", name)


def megatron_scenario():
    # GPT-3 175B, Megatron-LM's plan: tp 8, pp 8, interleaved with 3 chunks
    # per stage (96 / 24 = 4 layers each), sequence parallel, selective
    # recompute, ZeRO-1 = distributed optimizer. Every choice is expressible:
    # nothing on stderr.
    p = run("export", scenario("gpt3-175b-megatron.json"), "--to", "megatron")
    f = flags(p.stdout)
    expect = {"--tensor-model-parallel-size": "8", "--pipeline-model-parallel-size": "8",
              "--num-layers-per-virtual-pipeline-stage": "4", "--sequence-parallel": True,
              "--use-distributed-optimizer": True, "--recompute-granularity": "selective",
              "--micro-batch-size": "1", "--global-batch-size": "1536", "--bf16": True,
              "--num-layers": "96", "--hidden-size": "12288", "--num-attention-heads": "96",
              "--seq-length": "2048"}
    for k, v in expect.items():
        check(f.get(k) == v, f"{k}: {f.get(k)!r}, expected {v!r}")
    check(p.stderr == "", f"stderr: {p.stderr!r}")


def deepspeed_scenario():
    # Llama-3-70B with ZeRO-3 on 64 GPUs, tp 8: dp 8, 256 = 1 · 32 · 8.
    p = run("export", scenario("llama3-70b-fsdp-h100.json"), "--to", "deepspeed")
    d = json.loads(p.stdout)
    check(d["train_batch_size"] == 256 and d["train_micro_batch_size_per_gpu"] == 1
          and d["gradient_accumulation_steps"] == 32, f"batch keys {d}")
    check(d["zero_optimization"]["stage"] == 3, "ZeRO stage 3")
    check(d["bf16"] == {"enabled": True}, "bf16")
    check(d["optimizer"]["type"] == "AdamW", "AdamW")
    # Notes (tensor parallelism lives in the model code) go to stderr.
    check("strata: export: note: tp=8" in p.stderr, f"stderr: {p.stderr!r}")


def torchtitan_out(tmp):
    # --out writes the file whole and prints nothing; the file is TOML.
    out = os.path.join(tmp, "titan.toml")
    p = run("export", scenario("llama3-70b-fsdp-h100.json"), "--to", "torchtitan", "--out", out)
    check(p.stdout == "", "stdout empty with --out")
    with open(out, "rb") as fh:
        t = tomllib.load(fh)
    par = t["parallelism"]
    check(par["data_parallel_shard_degree"] == 8 and par["tensor_parallel_degree"] == 8,
          f"parallelism {par}")
    check(par["fsdp_reshard_after_forward"] == "always", "ZeRO-3 reshards after forward")
    check(t["training"]["global_batch_size"] == 256 and t["training"]["seq_len"] == 8192,
          f"training {t['training']}")
    check(t["activation_checkpoint"]["mode"] == "full", "full recompute")


def explore_dir(tmp):
    # A small explore run; every exported top plan is the record's plan.
    d = os.path.join(tmp, "explore")
    sc = os.path.join(SOURCE, "tests", "e2e", "scenarios", "gpt2-124m-explore.json")
    run("explore", sc, "--out", d, "--jobs", "2", "--top", "3")
    with open(os.path.join(d, "summary.json")) as fh:
        top = json.load(fh)["top"]
    check(len(top) == 3, f"{len(top)} top plans")
    for rank, rec in enumerate(top, 1):
        f = flags(run("export", d, "--to", "megatron", "--rank", str(rank)).stdout)
        plan, batch = rec["plan"], rec["batch"]
        check(f["--tensor-model-parallel-size"] == str(plan["tp"]), f"rank {rank}: tp")
        check(f["--micro-batch-size"] == str(batch["micro"]), f"rank {rank}: micro")
        check(f["--global-batch-size"] == str(batch["global"]), f"rank {rank}: global")
        zero = plan["zero"]
        check(("--use-distributed-optimizer" in f) == (zero >= 1), f"rank {rank}: zero {zero}")
        check(("--use-megatron-fsdp" in f) == (zero >= 2), f"rank {rank}: zero {zero} (pp 1)")
        granularity = {"none": None, "selective": "selective", "full": "full"}[plan["recompute"]]
        check(f.get("--recompute-granularity") == granularity, f"rank {rank}: recompute")
        ds = json.loads(run("export", d, "--to", "deepspeed", "--rank", str(rank)).stdout)
        check(ds["zero_optimization"]["stage"] == zero, f"rank {rank}: deepspeed stage")
    # Without --rank: the first of the top list.
    check(run("export", d, "--to", "megatron").stdout ==
          run("export", d, "--to", "megatron", "--rank", "1").stdout, "default rank 1")
    run("export", d, "--to", "megatron", "--rank", "4", rc=2)

    # A directory without its scenario copy, whose recorded scenario path
    # does not resolve: the error names --scenario, and --scenario resolves it.
    moved = os.path.join(tmp, "moved")
    os.makedirs(moved)
    with open(os.path.join(d, "summary.json")) as fh:
        s = json.load(fh)
    s["scenario"] = "elsewhere/sweep.json"
    with open(os.path.join(moved, "summary.json"), "w") as fh:
        json.dump(s, fh)
    # Its records too (export checks them as report does), not its manifest:
    # a directory of an older strata.
    for name in ("results.jsonl", "refined.jsonl"):
        if os.path.exists(os.path.join(d, name)):
            shutil.copy(os.path.join(d, name), os.path.join(moved, name))
    p = run("export", moved, "--to", "deepspeed", rc=2)
    check(p.stdout == "" and "pass --scenario FILE" in p.stderr, f"stderr: {p.stderr!r}")
    titan = run("export", moved, "--to", "deepspeed", "--scenario", sc).stdout
    # Explore keeps a copy of its scenario in DIR: with it, no --scenario.
    check(os.path.exists(os.path.join(d, "scenario.json")), "explore wrote DIR/scenario.json")
    shutil.copy(os.path.join(d, "scenario.json"), os.path.join(moved, "scenario.json"))
    check(run("export", moved, "--to", "deepspeed").stdout == titan, "DIR/scenario.json")
    # torchtitan refuses a ZeRO-1 plan of the top list, naming the rule.
    zero1 = [rank for rank, rec in enumerate(top, 1) if rec["plan"]["zero"] == 1]
    check(zero1, f"a ZeRO-1 plan among the top 3: {[rec['plan']['zero'] for rec in top]}")
    p = run("export", d, "--to", "torchtitan", "--rank", str(zero1[0]), rc=2)
    check("torchtitan/zero-1" in p.stderr, f"stderr: {p.stderr!r}")


def bad_input(tmp):
    # Bad input: exit 2, the file, JSON path and rule on stderr, nothing written.
    out = os.path.join(tmp, "never.sh")
    bad = os.path.join(SOURCE, "tests", "e2e", "bad", "tp-heads.json")
    p = run("export", bad, "--to", "megatron", "--out", out, rc=2)
    check("plan.tp: 5 does not divide heads=12" in p.stderr, f"stderr: {p.stderr!r}")
    check(not os.path.exists(out), "nothing written on bad input")
    p = run("export", scenario("gpt2-124m-1gpu.json"), "--to", "jax", rc=2)
    check("--to: must be one of megatron|deepspeed|torchtitan" in p.stderr, p.stderr)


def unlaunchable(tmp):
    # The plan explore once put first for Llama-3-70B on 8 DGX H100: dp 16,
    # tp 2, pp 2, ZeRO-2, interleaved 4, activation offload. No engine runs
    # it: each export exits 2 naming its rule and writes nothing.
    sc = os.path.join(tmp, "issue21.json")
    with open(sc, "w") as fh:
        json.dump({"model": {"preset": "llama3-70b", "seq_len": 4096},
                   "cluster": {"preset": "dgx-h100", "nodes": 8},
                   "batch": {"global": 512, "micro": 1},
                   "plan": {"dp": 16, "tp": 2, "pp": 2, "zero": 2, "schedule": "interleaved",
                            "virtual_stages": 4, "sequence_parallel": True,
                            "precision": "bf16", "optimizer": "adamw",
                            "offload": {"activations": True}}}, fh)
    rules = {"megatron": "megatron-lm-2025/sharded-grads-with-pp",
             "deepspeed": "deepspeed/sharded-grads-with-pp",
             "torchtitan": "torchtitan/activation-offload"}
    for engine, rule in rules.items():
        out = os.path.join(tmp, "never." + engine)
        p = run("export", sc, "--to", engine, "--out", out, rc=2)
        stack, name = rule.split("/")
        check(p.stdout == "" and f"{stack} cannot launch this plan ({name}:" in p.stderr
              and rule in p.stderr, f"{engine}: stderr {p.stderr!r}")
        check(not os.path.exists(out), f"{engine}: nothing written")


def round_trip(tmp):
    # `strata import` reads an export back (docs/export.md): exporting the
    # imported scenario gives the same settings for each engine that can run
    # the bundled scenario, and torchtitan's
    # own scenario (its stack already torchtitan's) simulates to the same
    # figures after the round trip.
    for name, engine in [("gpt3-175b-megatron.json", "megatron"), ("gpt3-175b-megatron.json", "deepspeed"),
                         ("llama3-8b-torchtitan-h100.json", "torchtitan")]:
        base = scenario(name)
        first = run("export", base, "--to", engine, rc=None if engine == "deepspeed" else 0)
        if first.returncode != 0:
            continue  # DeepSpeed cannot run GPT-3's interleaved schedule (checked in unlaunchable)
        exported = os.path.join(tmp, "exported." + engine)
        with open(exported, "w") as fh:
            fh.write(first.stdout)
        imported = os.path.join(tmp, f"imported-{engine}.json")
        p = run("import", exported, "--from", engine, "--scenario", base, "--out", imported)
        check(p.stdout == "", "stdout empty with --out")
        again = run("export", imported, "--to", engine).stdout
        # The settings, not the comments: the first export's notes on the
        # engine's defaults are gone once the scenario names its stack.
        settings = lambda text: [l for l in text.splitlines() if not l.startswith("#")]
        check(settings(again) == settings(first.stdout), f"{name} --to {engine}: export of the import differs\n{first.stdout}\n{again}")
        if engine == "torchtitan":
            a = json.loads(run("simulate", base, "--format", "json").stdout)
            b = json.loads(run("simulate", imported, "--format", "json").stdout)
            check((a["step_time_s"], a["peak_memory_bytes"]) == (b["step_time_s"], b["peak_memory_bytes"]),
                  f"torchtitan round trip: {a['step_time_s']} s, {a['peak_memory_bytes']} B before; "
                  f"{b['step_time_s']} s, {b['peak_memory_bytes']} B after")
    # A file of another engine: one message naming file and rule, nothing written.
    out = os.path.join(tmp, "never.json")
    p = run("import", os.path.join(tmp, "exported.megatron"), "--from", "torchtitan",
            "--scenario", scenario("gpt3-175b-megatron.json"), "--out", out, rc=2)
    check("exported.megatron: line" in p.stderr and "[import-syntax]" in p.stderr, f"stderr: {p.stderr!r}")
    check(not os.path.exists(out), "nothing written on bad input")


def main():
    tmp = tempfile.mkdtemp(prefix="strata-e2e-export-")
    try:
        megatron_scenario()
        deepspeed_scenario()
        torchtitan_out(tmp)
        explore_dir(tmp)
        bad_input(tmp)
        unlaunchable(tmp)
        round_trip(tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print("export: all checks passed")


if __name__ == "__main__":
    STRATA, SOURCE = sys.argv[1], sys.argv[2]
    main()
