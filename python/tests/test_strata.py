"""The Python module against the CLI built from the same sources: each call
returns what the matching `strata ... --format json` prints (the same
renderer, so equal as parsed JSON, numbers bit for bit), errors carry the
CLI's message and fields, long calls release the GIL and stop on Ctrl-C."""
import json
import pathlib
import os
import signal
import threading
import time

import pytest

import strata

MEGATRON = "configs/scenarios/gpt3-175b-megatron.json"
SMALL_EXPLORE = "tests/e2e/scenarios/gpt2-124m-explore.json"
AUTO_EXPLORE = "configs/scenarios/gpt3-175b-explore.json"
TINY = "configs/scenarios/tiny-cpu.json"
CALIBRATION = "fuzz/corpus/calibration/cpu-absolute.json"

# A scenario as a dict (no comments: json.dump writes it for the CLI too).
GPT2_DICT = {
    "model": "gpt2-124m",
    "cluster": "dgx-h100",
    "batch": {"global": 64, "micro": 2},
    "plan": {"dp": 4, "tp": 2, "zero": 1, "recompute": "selective", "optimizer": "adamw", "precision": "bf16"},
}


def test_simulate_equals_cli(root, cli):
    # The target: the CLI's step_time_s, and every other field too,
    # since both render through report::simulate.
    py = strata.simulate(str(root / MEGATRON))
    ref = cli.json("simulate", root / MEGATRON)
    assert py["step_time_s"] == ref["step_time_s"]
    assert dict(py) == ref
    assert isinstance(py, dict) and py["feasible"] is True


def test_simulate_dict_and_json_text_equal_cli(root, cli, tmp_path):
    # A dict is read as the file json.dump writes; JSON text (comments and
    # all) as the file it came from.
    # "scenario" names the source: the file, or <dict> / <string>.
    f = tmp_path / "gpt2.json"
    f.write_text(json.dumps(GPT2_DICT))
    mine, ref = dict(strata.simulate(GPT2_DICT)), cli.json("simulate", f)
    assert mine.pop("scenario") == "<dict>" and ref.pop("scenario") == str(f)
    assert mine == ref
    mine, ref = dict(strata.simulate((root / MEGATRON).read_text())), cli.json("simulate", root / MEGATRON)
    assert mine.pop("scenario") == "<string>" and ref.pop("scenario") == str(root / MEGATRON)
    assert mine == ref


def test_simulate_stragglers_equal_cli(root, cli):
    # Slow GPUs and the sampled distribution come through the same renderer:
    # the same seed, the same figures as the CLI's.
    path = root / "configs/scenarios/llama3-8b-stragglers-h100.json"
    py = dict(strata.simulate(str(path)))
    assert py == cli.json("simulate", path)
    assert py["stage_slowdown"] == [1.2] and py["stragglers"]["samples"] == 200


def test_simulate_node_groups_equal_cli(root, cli):
    # A cluster of node groups: each stage's GPUs and memory, as the CLI says.
    path = root / "configs/scenarios/hetero-a100-v100.json"
    py = dict(strata.simulate(str(path)))
    assert py == cli.json("simulate", path)
    assert [s["gpus"] for s in py["memory_per_stage"]] == ["a100-80g (dgx-a100-80g)", "v100-32g (dgx-1)"]


def test_simulate_chunk_and_analytical_equal_cli(root, cli):
    # The options map onto --granularity chunk and --analytical.
    assert dict(strata.simulate(str(root / MEGATRON), granularity="chunk")) == cli.json(
        "simulate", root / MEGATRON, "--granularity", "chunk")
    assert dict(strata.simulate(str(root / MEGATRON), analytical=True)) == cli.json(
        "simulate", root / MEGATRON, "--analytical")


def test_trace_is_the_clis(root, cli, tmp_path):
    # simulate(trace=) writes the file --trace writes (Perfetto opens it),
    # byte for byte, and the notebook view names it.
    mine, theirs = tmp_path / "py.json", tmp_path / "cli.json"
    r = strata.simulate(GPT2_DICT, trace=mine)
    f = tmp_path / "gpt2.json"
    f.write_text(json.dumps(GPT2_DICT))
    cli("simulate", f, "--trace", theirs, "--format", "json")
    assert mine.read_bytes() == theirs.read_bytes()
    assert "traceEvents" in json.loads(mine.read_text())
    assert r.trace == str(mine) and str(mine) in r._repr_html_()
    assert "ui.perfetto.dev" in strata.perfetto_html(mine)


def test_trace_never_replaces_an_input(root, cli, tmp_path):
    # As --trace: the scenario itself, and a file it names (here its model),
    # are refused as the trace's target with the CLI's message, and left as they were.
    model = tmp_path / "model.json"
    model.write_bytes((root / "configs" / "models" / "gpt2-124m.json").read_bytes())
    sc = json.loads(json.dumps(GPT2_DICT))
    sc["model"] = str(model)
    f = tmp_path / "s.json"
    f.write_text(json.dumps(sc))
    for target in (f, model):
        before = target.read_bytes()
        with pytest.raises(strata.InputError) as e:
            strata.simulate(str(f), trace=target)
        assert target.read_bytes() == before
        p = cli("simulate", f, "--trace", target, check=False)
        assert p.returncode == 2 and p.stderr == f"strata: error: {e.value}\n"


def test_repr_html_is_a_summary_table(root):
    # A notebook shows the result as a table holding its figures.
    r = strata.simulate(str(root / MEGATRON))
    page = r._repr_html_()
    assert page.startswith("<table>") and "step_time_s" in page and "peak_memory_bytes" in page
    assert f"{r['step_time_s']:.6g}" in page


def test_input_error_carries_file_path_rule(root, cli, tmp_path):
    # Bad input raises strata.InputError with the reader's file, JSON path
    # and rule; its message is the one the CLI prints after "strata: error: ".
    bad = json.loads(json.dumps(GPT2_DICT))
    bad["plan"]["tensor_parallel"] = 2
    f = tmp_path / "bad.json"
    f.write_text(json.dumps(bad))
    with pytest.raises(strata.InputError) as e:
        strata.simulate(str(f))
    p = cli("simulate", f, check=False)
    assert p.returncode == 2 and p.stdout == ""
    assert p.stderr == f"strata: error: {e.value}\n"
    assert e.value.file == str(f)
    assert e.value.path == "plan.tensor_parallel"
    assert e.value.rule and e.value.rule in str(e.value)
    assert isinstance(e.value, ValueError) and isinstance(e.value, strata.Error)
    # The same scenario as a dict is named <dict>.
    with pytest.raises(strata.InputError) as d:
        strata.simulate(bad)
    assert d.value.file == "<dict>" and d.value.path == "plan.tensor_parallel"


def test_worker_thread_errors_raise_input_error(root, tmp_path):
    # explore and validate run on a worker thread: bad input found there
    # still arrives as strata.InputError with its fields.
    bad = json.loads(json.dumps(GPT2_DICT))
    bad["space"] = {"tp": [1, 2], "zero_stage": [1]}
    with pytest.raises(strata.InputError) as e:
        strata.explore(bad, out=tmp_path / "x")
    assert e.value.file == "<dict>" and e.value.path == "space.zero_stage"
    with pytest.raises(strata.InputError) as v:
        strata.validate(str(tmp_path / "missing.json"))
    assert v.value.file == str(tmp_path / "missing.json") and v.value.rule == "file not found"


def test_missing_file_and_bad_arguments_raise(root, cli):
    # Never a crash: a missing file is the CLI's InputError, a wrong type a
    # TypeError, a bad option value an InputError naming it.
    with pytest.raises(strata.InputError) as e:
        strata.simulate("no/such/scenario.json")
    assert str(e.value) == cli("simulate", "no/such/scenario.json", check=False).stderr[len("strata: error: "):-1]
    with pytest.raises(TypeError):
        strata.simulate(42)
    with pytest.raises(strata.InputError) as g:
        strata.simulate(str(root / MEGATRON), granularity="step")
    assert g.value.file == "granularity"
    with pytest.raises(strata.InputError) as t:
        strata.export(str(root / MEGATRON), to="jax")
    assert t.value.file == "to" and "megatron" in t.value.rule


def test_describe_preset_and_scenario_equal_cli(root, cli):
    # A preset by name and a scenario file, as `strata describe` renders them.
    d = strata.describe("gpt3-175b")
    assert dict(d) == cli.json("describe", "gpt3-175b")
    assert d["model"]["name"] == "gpt3-175b" and d["model"]["params"] > 170e9
    assert dict(strata.describe(str(root / MEGATRON))) == cli.json("describe", root / MEGATRON)
    with pytest.raises(strata.InputError):
        strata.describe("gpt-nonexistent")


def test_preset_listings_equal_cli(cli):
    # models(), gpus(), clusters(): the bundled presets, the known ones among them.
    for fn, name in ((strata.models, "models"), (strata.gpus, "gpus"), (strata.clusters, "clusters")):
        mine = fn()
        assert mine and [dict(x) for x in mine] == cli.json(name)
    assert {"gpt3-175b", "llama3-70b", "gpt2-124m"} <= {m["name"] for m in strata.models()}
    assert {"a100-80g", "h100-sxm", "h200"} <= {g["name"] for g in strata.gpus()}
    # The 1x<gpu> clusters are derived from the GPUs, one each.
    names = {c["name"] for c in strata.clusters()}
    assert {"dgx-a100-80g", "dgx-h100", "cpu-local"} <= names
    assert {"1x" + g["name"] for g in strata.gpus()} <= names


def _summary_without_run(s):
    s = dict(s)
    s.pop("run", None)  # wall time and threads: this run's
    return s


def test_explore_equals_cli(root, cli, tmp_path):
    # The same plans with the same figures (results.jsonl, line for line
    # once sorted by plan id), the same summary and report.
    r = strata.explore(str(root / SMALL_EXPLORE), out=tmp_path / "py", jobs=2)
    ref = cli.json("explore", root / SMALL_EXPLORE, "--out", tmp_path / "cli", "--jobs", 2)
    mine = sorted(r, key=lambda x: x["plan_id"])
    theirs = sorted((json.loads(l) for l in (tmp_path / "cli" / "results.jsonl").read_text().splitlines() if l),
                    key=lambda x: x["plan_id"])
    assert len(mine) == len(theirs) > 0 and len(r) == len(mine)
    assert [x["plan_id"] for x in mine] == [x["plan_id"] for x in theirs]
    assert mine == theirs
    assert _summary_without_run(r.summary) == _summary_without_run(ref)
    assert r.top and r.top[0]["plan_id"] == ref["top"][0]["plan_id"]
    assert r.report_path.exists() and "<iframe srcdoc=" in r._repr_html_()


def test_explore_progress(root, tmp_path):
    # The callback runs on the calling thread with the explorer's figures,
    # the last call at 100 %; one that raises stops the search, and the
    # directory resumes to the same plans as an uninterrupted run.
    seen, threads = [], set()

    def note(d):
        seen.append(d)
        threads.add(threading.get_ident())

    r = strata.explore(str(root / SMALL_EXPLORE), out=tmp_path / "a", jobs=2, progress=note, progress_interval=0)
    assert seen and threads == {threading.get_ident()}
    assert set(seen[-1]) == {"checked", "total", "scored", "to_score", "elapsed_s", "scoring_s", "fraction"}
    assert seen[-1]["checked"] == seen[-1]["total"] > 0
    assert seen[-1]["scored"] == seen[-1]["to_score"] == len(r)
    assert [d["scored"] for d in seen] == sorted(d["scored"] for d in seen)

    class Enough(Exception):
        pass

    def stop(d):
        raise Enough()

    with pytest.raises(Enough):
        strata.explore(str(root / SMALL_EXPLORE), out=tmp_path / "b", jobs=2, progress=stop, progress_interval=0)
    resumed = strata.explore(str(root / SMALL_EXPLORE), out=tmp_path / "b", jobs=2, resume=True)
    assert sorted(x["plan_id"] for x in resumed) == sorted(x["plan_id"] for x in r)


def test_stub_matches_module():
    # python/strata/_core.pyi names every function of the native module with
    # its parameters in order (nanobind's signature, the first line of its
    # docstring): a binding changed without its stub fails here.
    import ast
    import inspect
    stub = ast.parse((pathlib.Path(strata.__file__).parent / "_core.pyi").read_text())
    declared = {f.name: [a.arg for a in f.args.args] for f in stub.body if isinstance(f, ast.FunctionDef)}
    native = {}
    for name, fn in vars(strata._core).items():
        if name.startswith("_") or inspect.isclass(fn) or not callable(fn):
            continue
        head = fn.__doc__.splitlines()[0]
        params = head[head.index("(") + 1:head.rindex(") ->")]
        native[name] = [p.split(":")[0].strip().lstrip("*") for p in _split_params(params) if p.strip() not in ("/", "*")]
    assert declared == native


def _split_params(text):
    """A signature's parameters, split at top-level commas."""
    out, depth, cur = [], 0, ""
    for ch in text:
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        if ch == "," and depth == 0:
            out.append(cur)
            cur = ""
        else:
            cur += ch
    if cur.strip():
        out.append(cur)
    return out


def test_merge_and_report_equal_cli(root, cli, tmp_path):
    # Two shards merged as the CLI merges them (the same summary and
    # records), and the report of the merged directory as `strata report`
    # writes it (the same Markdown and CSV, the same lines printed).
    scenario = str(root / SMALL_EXPLORE)
    shards = [strata.explore(scenario, out=tmp_path / f"s{i}", jobs=2, shard=(i, 2)) for i in (0, 1)]
    merged = strata.merge(shards, tmp_path / "py")
    ref = cli.json("merge", tmp_path / "s0", tmp_path / "s1", "--out", tmp_path / "cli")
    assert _summary_without_run(merged.summary) == _summary_without_run(ref)
    assert sorted(x["plan_id"] for x in merged) == sorted(x["plan_id"] for x in strata.explore(scenario, jobs=2))
    text = strata.report(merged, out=tmp_path / "rpy")
    printed = cli("report", tmp_path / "py", "--out", tmp_path / "rcli", "--quiet").stdout
    assert text == printed.replace(str(tmp_path / "rcli"), str(tmp_path / "rpy"))
    for name in ("report.md", "results.csv"):
        assert (tmp_path / "rpy" / name).read_bytes() == (tmp_path / "rcli" / name).read_bytes()
    with pytest.raises(strata.InputError):
        strata.merge([tmp_path / "s0", tmp_path / "nowhere"], tmp_path / "bad")


def test_explore_to_frame(root):
    # One row per record, nested fields flattened.
    import pandas as pd  # scripts/test.sh installs it in the venv
    r = strata.explore(str(root / SMALL_EXPLORE), jobs=2)
    df = r.to_frame()
    assert isinstance(df, pd.DataFrame) and len(df) == len(r)
    assert {"plan_id", "step_time_s", "plan.tp"} <= set(df.columns)
    assert sorted(df["plan_id"]) == sorted(x["plan_id"] for x in r)


def test_import_equals_cli(root, cli, tmp_path):
    # `strata import` of an export: the CLI's scenario, field for field,
    # from a file or from the text; it simulates as the CLI's does.
    flags = tmp_path / "flags.sh"
    flags.write_text(cli("export", root / MEGATRON, "--to", "megatron").stdout)
    p = cli("import", flags, "--from", "megatron", "--scenario", root / MEGATRON)
    from_file = strata.import_plan(str(flags), "megatron", str(root / MEGATRON))
    from_text = strata.import_plan(flags.read_text(), "megatron", str(root / MEGATRON))
    assert from_file == json.loads(p.stdout) == from_text
    assert from_file["stack"] == "megatron-lm-2025" and from_file["plan"]["tp"] == 8
    assert from_file.from_scenario and from_file.ignored == []
    out = tmp_path / "imported.json"
    out.write_text(p.stdout)
    assert strata.simulate(dict(from_file))["step_time_s"] == strata.simulate(str(out))["step_time_s"]
    # A file of another engine: the CLI's refusal, word for word.
    with pytest.raises(strata.InputError) as e:
        strata.import_plan(str(flags), "torchtitan", str(root / MEGATRON))
    q = cli("import", flags, "--from", "torchtitan", "--scenario", root / MEGATRON, check=False)
    assert q.returncode == 2 and q.stderr == f"strata: error: {e.value}\n"
    assert "import-syntax" in e.value.rule


def test_export_equals_cli(root, cli, tmp_path):
    # The text `strata export` prints, for a scenario and for an explore
    # directory's best plan; what the engine cannot express is listed.
    f = tmp_path / "gpt2.json"
    f.write_text(json.dumps(GPT2_DICT))
    fsdp = json.loads(json.dumps(GPT2_DICT))
    fsdp["plan"].update(zero=3, sequence_parallel=True)  # torchtitan: FSDP, TP always sequence-parallel
    g = tmp_path / "gpt2-fsdp.json"
    g.write_text(json.dumps(fsdp))
    cases = [(root / MEGATRON, "megatron"), (f, "megatron"), (f, "deepspeed"), (g, "torchtitan")]
    for scenario, to in cases:
        p = cli("export", scenario, "--to", to)
        text = strata.export(str(scenario), to=to)
        assert text == p.stdout and isinstance(text, str)
        for u in text.unsupported:
            assert u in p.stderr
    assert strata.export(fsdp, to="torchtitan") == cli("export", g, "--to", "torchtitan").stdout
    # A plan the engine cannot launch: the CLI's refusal, word for word.
    with pytest.raises(strata.InputError) as e:
        strata.export(str(root / MEGATRON), to="deepspeed")
    p = cli("export", root / MEGATRON, "--to", "deepspeed", check=False)
    assert p.returncode == 2 and p.stderr == f"strata: error: {e.value}\n"
    assert e.value.path == "plan.schedule"
    r = strata.explore(str(root / SMALL_EXPLORE), out=tmp_path / "x", jobs=2)
    assert strata.export(r, to="megatron", rank=2) == cli("export", tmp_path / "x", "--to", "megatron",
                                                          "--rank", 2).stdout


def test_validate_cpu_predicts_as_cli(root, cli):
    # The plan run on the CPU executor: measurements vary run to run, the
    # prediction with a given calibration does not and is the CLI's.
    r = strata.validate(str(root / TINY), backend="cpu", steps=1, calibration=str(root / CALIBRATION))
    ref = cli.json("validate", root / TINY, "--backend", "cpu", "--steps", 1, "--calibration", root / CALIBRATION)
    assert set(r) == set(ref)
    assert r["predicted"] == ref["predicted"]
    assert r["ranks"] == 4 and len(r["step_times_s"]) == 1 and r["measured"]["step_time_s"] > 0
    with pytest.raises(strata.InputError):
        strata.validate(str(root / TINY), backend="tpu")


def test_validate_cuda_runs_on_this_gpu_or_says_why_not(root):
    # A module built with the CUDA backend runs a one-GPU plan on this
    # process's GPU (without one, the executor's error, as the CLI's); a
    # plan of several GPUs is refused by the executor's rule before any
    # device is touched. A module built without it refuses the backend.
    one_gpu = str(root / "configs/scenarios/gpu-1x-plain.json")
    if not strata._core.has_cuda:
        with pytest.raises(strata.InputError, match="built without the CUDA backend"):
            strata.validate(one_gpu, backend="cuda")
        return
    with pytest.raises(strata.InputError, match="the plan runs on 4 GPUs"):
        strata.validate(str(root / TINY), backend="cuda")
    try:
        r = strata.validate(one_gpu, backend="cuda", steps=1)
    except strata.Error as e:
        assert "no CUDA device is visible" in str(e)
        return
    assert r["ranks"] == 1 and len(r["step_times_s"]) == 1 and r["measured"]["step_time_s"] > 0


def test_explore_releases_gil_and_stops_on_ctrl_c(root, tmp_path):
    # The GPT-3 auto space takes far longer than a second: a Python thread
    # keeps running beside it (the GIL is released), and SIGINT raises
    # KeyboardInterrupt within a second instead of finishing the search.
    ticks = []
    done = threading.Event()

    def count():
        while not done.is_set():
            ticks.append(1)
            time.sleep(0.01)

    # Python's own handler (raises KeyboardInterrupt), even where SIGINT was
    # inherited ignored (a background job).
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    counter = threading.Thread(target=count)
    counter.start()
    threading.Timer(1.0, lambda: os.kill(os.getpid(), signal.SIGINT)).start()
    t0 = time.perf_counter()
    try:
        with pytest.raises(KeyboardInterrupt):
            strata.explore(str(root / AUTO_EXPLORE), out=tmp_path / "auto", jobs=2)
    finally:
        done.set()
        counter.join()
        signal.signal(signal.SIGINT, previous)
    elapsed = time.perf_counter() - t0
    assert elapsed < 5, f"stopped after {elapsed:.1f} s"
    assert len(ticks) > 30, f"the counting thread ran {len(ticks)} times in {elapsed:.1f} s"
