"""Strata from Python: predict the step time and memory of a training plan,
search a plan space, export a plan, validate it on the CPU backend.

The C++ libraries are linked (``strata._core``); every function returns what
the ``strata`` command line prints with ``--format json``, as plain dicts
(subclasses that show themselves in a notebook), with the same field names.
A scenario is a dict, a path (``str`` or ``os.PathLike``) or JSON text (a
``str`` that starts with ``{`` or holds a newline). See docs/python.md.
"""
from __future__ import annotations

import html as _html
import json as _json
import os as _os
import pathlib as _pathlib
import tempfile as _tempfile
from collections.abc import Iterator, Mapping
from typing import Any, Callable, Optional, Union

from . import _core
from ._errors import Error, InputError, OutOfMemoryError

__all__ = [
    "Error",
    "InputError",
    "OutOfMemoryError",
    "Result",
    "ExploreResult",
    "ExportText",
    "simulate",
    "describe",
    "explore",
    "export",
    "import_plan",
    "merge",
    "report",
    "validate",
    "models",
    "gpus",
    "clusters",
    "stacks",
    "perfetto_html",
]

__version__: str = _core.version

Scenario = Union[Mapping[str, Any], str, "_os.PathLike[str]"]


# ----------------------------------------------------------------- inputs --

def _is_json_text(s: str) -> bool:
    t = s.lstrip()
    return t.startswith("{") or "\n" in s


def _source(scenario: Any, what: str = "scenario") -> "_core.Source":
    """A scenario (or model) as the native module takes it: a file, or JSON
    text named ``<dict>`` / ``<string>`` in errors, its relative paths
    resolved against the working directory."""
    src = _core.Source()
    if isinstance(scenario, ExploreResult):
        src.path = str(scenario.out)
    elif isinstance(scenario, Mapping):
        src.text = _json.dumps(scenario)
        src.source = "<dict>"
        src.base_dir = _os.getcwd()
    elif isinstance(scenario, _os.PathLike):
        src.path = _os.fspath(scenario)
    elif isinstance(scenario, str):
        if _is_json_text(scenario):
            src.text = scenario
            src.source = "<string>"
            src.base_dir = _os.getcwd()
        else:
            src.path = scenario
    else:
        raise TypeError(f"{what} must be a dict, a path or JSON text, not {type(scenario).__name__}")
    return src


# ---------------------------------------------------------------- results --

def _cell(v: Any) -> str:
    if isinstance(v, float):
        return _html.escape(f"{v:.6g}")
    if isinstance(v, (dict, list)):
        text = _json.dumps(v)
        if len(text) > 200:
            text = text[:197] + "..."
        return f"<code>{_html.escape(text)}</code>"
    return _html.escape(str(v))


def _html_table(d: Mapping[str, Any], title: str) -> str:
    rows = []
    for k, v in d.items():
        if isinstance(v, Mapping) and v and all(not isinstance(x, (dict, list)) for x in v.values()):
            inner = "".join(
                f"<tr><td style='padding-left:1.5em'>{_html.escape(str(ik))}</td><td>{_cell(iv)}</td></tr>"
                for ik, iv in v.items()
            )
            rows.append(f"<tr><th colspan=2 style='text-align:left'>{_html.escape(str(k))}</th></tr>{inner}")
        else:
            rows.append(f"<tr><th style='text-align:left'>{_html.escape(str(k))}</th><td>{_cell(v)}</td></tr>")
    return (
        f"<table><caption style='text-align:left'><b>{_html.escape(title)}</b></caption>"
        + "".join(rows)
        + "</table>"
    )


class Result(dict):
    """A command's JSON output as a dict (the CLI's field names), with an
    HTML summary for notebooks (``_repr_html_``)."""

    _title = "strata"

    def __init__(self, data: Mapping[str, Any], title: Optional[str] = None) -> None:
        super().__init__(data)
        if title is not None:
            self._title = title

    def _repr_html_(self) -> str:
        return _html_table(self, self._title)


class SimulationResult(Result):
    """``strata simulate --format json``: ``step_time_s``, ``feasible``,
    ``peak_memory_bytes``, ``time_breakdown_s``, ``memory_breakdown_bytes``...
    ``trace`` is the Perfetto trace written (``simulate(..., trace=PATH)``)."""

    trace: Optional[str] = None

    def _repr_html_(self) -> str:
        out = _html_table(self, self._title)
        if self.trace:
            out += perfetto_html(self.trace, inline=False)
        return out


def perfetto_html(trace: Union[str, "_os.PathLike[str]"], inline: bool = True) -> str:
    """HTML that opens a written trace (``simulate(..., trace=PATH)``, the
    CLI's ``--trace``) in Perfetto: with ``inline``, a button that opens
    https://ui.perfetto.dev and hands it the file's bytes (Perfetto's
    postMessage protocol); always the path, to open with "Open trace file".
    ``IPython.display.HTML(strata.perfetto_html(path))`` shows it."""
    path = _os.fspath(trace)
    note = (
        f"<p>Trace: <code>{_html.escape(path)}</code> — open it in "
        "<a href='https://ui.perfetto.dev' target='_blank'>ui.perfetto.dev</a> (Open trace file).</p>"
    )
    if not inline:
        return note
    data = _pathlib.Path(path).read_bytes()
    import base64

    b64 = base64.b64encode(data).decode("ascii")
    name = _html.escape(_os.path.basename(path))
    script = (
        "(function(){var w=window.open('https://ui.perfetto.dev');"
        f"var b=atob('{b64}');var a=new Uint8Array(b.length);"
        "for(var i=0;i<b.length;i++)a[i]=b.charCodeAt(i);"
        "var t=setInterval(function(){w.postMessage('PING','https://ui.perfetto.dev');},50);"
        "window.addEventListener('message',function h(e){if(e.data!=='PONG')return;"
        "clearInterval(t);window.removeEventListener('message',h);"
        f"w.postMessage({{perfetto:{{buffer:a.buffer,title:'{name}'}}}},'https://ui.perfetto.dev');}});}})()"
    )
    return note + f"<button onclick=\"{_html.escape(script)}\">Open {name} in Perfetto</button>"


class ExportText(str):
    """``strata export``'s text (what it prints), with ``unsupported`` (the
    plan's choices the engine cannot express; the CLI says them on stderr)
    and ``notes`` (approximations, what is left to the model code)."""

    unsupported: list
    notes: list


class ExploreResult:
    """``strata.explore``'s result: iterating yields one dict per scored plan
    (the records of ``out/results.jsonl``: ``plan_id``, ``batch``, ``plan``
    and the fields of ``simulate``), ``summary`` is what the CLI prints with
    ``--format json`` (counts, rejections per rule, the Pareto front and the
    top plans, ``run``), ``to_frame()`` a pandas DataFrame of the records. In
    a notebook it shows the explore report (``out/report.html``) inline.
    Without an ``out`` directory the results live in a temporary one, removed
    when this object is."""

    def __init__(self, summary: Mapping[str, Any], out: str, tmp: Any = None, warning: str = "") -> None:
        self.summary = Result(summary, "strata explore")
        self.out = _pathlib.Path(out)
        self.report_warning = warning
        self._tmp = tmp  # a TemporaryDirectory, kept alive with the result

    @property
    def results_path(self) -> _pathlib.Path:
        return self.out / "results.jsonl"

    @property
    def report_path(self) -> _pathlib.Path:
        return self.out / "report.html"

    def __iter__(self) -> Iterator[dict]:
        return self._records("results.jsonl")

    def refined(self) -> Iterator[dict]:
        """The kept plans (Pareto front, top) re-simulated per layer (``out/refined.jsonl``)."""
        return self._records("refined.jsonl")

    def _records(self, name: str) -> Iterator[dict]:
        path = self.out / name
        if not path.exists():
            return
        with open(path, encoding="utf-8") as f:
            for line in f:
                if line.endswith("\n") and line.strip():
                    yield _json.loads(line)

    def __len__(self) -> int:
        return sum(1 for _ in self)

    @property
    def top(self) -> list:
        return list(self.summary.get("top", []))

    @property
    def pareto(self) -> list:
        return list(self.summary.get("pareto", []))

    def to_frame(self):
        """The records as a pandas DataFrame, nested fields flattened
        (``plan.tp``, ``time_breakdown_s.compute``); needs pandas."""
        try:
            import pandas as pd
        except ImportError as e:  # pragma: no cover - depends on the environment
            raise ImportError("ExploreResult.to_frame() needs pandas (pip install pandas)") from e
        return pd.json_normalize(list(self))

    def report_html(self) -> str:
        """The explore report's page (``out/report.html``)."""
        return self.report_path.read_text(encoding="utf-8")

    def _repr_html_(self) -> str:
        if self.report_path.exists():
            page = _html.escape(self.report_html(), quote=True)
            return f"<iframe srcdoc=\"{page}\" style='width:100%;height:720px;border:0'></iframe>"
        return self.summary._repr_html_()

    def __repr__(self) -> str:
        counts = self.summary.get("counts", {})
        best = self.top[0].get("plan_id", "-") if self.top else "-"
        return f"<strata.ExploreResult {self.out}: counts {counts}, best {best}>"


# ------------------------------------------------------------------ calls --

def simulate(
    scenario: Scenario,
    *,
    trace: Optional[Union[str, "_os.PathLike[str]"]] = None,
    granularity: str = "layer",
    analytical: bool = False,
) -> SimulationResult:
    """``strata simulate SCENARIO --format json``: the step's time and
    memory, predicted. ``trace``: write the step's Chrome/Perfetto trace
    there (``--trace``); ``granularity="chunk"``: the explorer's level;
    ``analytical``: closed-form memory."""
    t = _os.fspath(trace) if trace is not None else ""
    text = _core.simulate(_source(scenario), analytical, granularity, t, "json")
    r = SimulationResult(_json.loads(text), "strata simulate")
    r.trace = t or None
    return r


def describe(model: Union[Scenario, str]) -> Result:
    """``strata describe MODEL_OR_SCENARIO --format json``: a model preset
    name, a model file (Strata's or a Hugging Face config.json), a scenario
    file, or either as a dict / JSON text. The reader's notes (a Hugging
    Face config's defaults) are in the result's ``notes`` attribute."""
    if isinstance(model, Mapping) or (isinstance(model, str) and _is_json_text(model)):
        obj = model if isinstance(model, Mapping) else _json.loads(model)
        is_scenario = isinstance(obj, Mapping) and any(k in obj for k in ("cluster", "batch", "plan"))
        src = _source(model)
        text, notes = _core.describe(None, src, is_scenario, "json")
    else:
        target = _os.fspath(model) if isinstance(model, _os.PathLike) else model
        if not isinstance(target, str):
            raise TypeError(f"model must be a preset name, a path, a dict or JSON text, not {type(model).__name__}")
        text, notes = _core.describe(target, _core.Source(), False, "json")
    r = Result(_json.loads(text), "strata describe")
    r.notes = list(notes)
    return r


def explore(
    scenario: Scenario,
    out: Optional[Union[str, "_os.PathLike[str]"]] = None,
    jobs: Optional[int] = None,
    *,
    resume: bool = False,
    shard: Optional[tuple] = None,
    top: int = 10,
    rank_by: Optional[str] = None,
    max_plans: Optional[int] = None,
    progress: Optional[Callable[[dict], Any]] = None,
    progress_interval: float = 1.0,
) -> ExploreResult:
    """``strata explore SCENARIO --out DIR``: search the scenario's space on
    ``jobs`` threads (default: the hardware's). ``out``: the output directory
    (default: a temporary one); ``resume``, ``shard=(i, n)``, ``top``,
    ``rank_by``, ``max_plans``: the CLI's options. Releases the GIL; Ctrl-C
    stops it (KeyboardInterrupt; the directory can be resumed).

    ``progress``: called on the calling thread at most every
    ``progress_interval`` seconds, and once at the end, with a dict:
    ``checked`` of ``total`` plans checked, ``scored`` of ``to_score``,
    ``elapsed_s``, ``scoring_s`` and ``fraction`` (of the scoring, by cost:
    what the CLI's ETA uses). An exception it raises stops the explore and
    propagates, as Ctrl-C does."""
    tmp = None
    if out is None:
        tmp = _tempfile.TemporaryDirectory(prefix="strata-explore-")
        out_dir = tmp.name
    else:
        out_dir = _os.fspath(out)
    i, n = shard if shard is not None else (0, 1)
    text, warning = _core.explore(
        _source(scenario),
        out_dir,
        int(jobs) if jobs else 0,
        bool(resume),
        int(i),
        int(n),
        int(top),
        rank_by,
        int(max_plans) if max_plans is not None else _core.default_max_plans,
        "json",
        progress,
        float(progress_interval),
    )
    return ExploreResult(_json.loads(text), out_dir, tmp, warning)


def merge(
    dirs: "list[Union[str, _os.PathLike[str], ExploreResult]]",
    out: Union[str, "_os.PathLike[str]"],
) -> ExploreResult:
    """``strata merge DIR... --out OUT``: the shard directories of one
    explore (``shard=(i, n)``) combined into ``out``: every record verified,
    counts summed, the Pareto front and top plans recomputed. Releases the GIL."""
    paths = [_os.fspath(d.out if isinstance(d, ExploreResult) else d) for d in dirs]
    text = _core.merge(paths, _os.fspath(out), "json")
    return ExploreResult(_json.loads(text), _os.fspath(out))


def report(
    explored: Union[str, "_os.PathLike[str]", ExploreResult],
    out: Optional[Union[str, "_os.PathLike[str]"]] = None,
) -> str:
    """``strata report DIR [--out DIR2]``: the comparison report of an
    explore directory (``report.html``, ``report.md``, ``results.csv``),
    written to ``out`` (default: the directory itself) after every record is
    verified; returns what the CLI prints (the files written). Releases the GIL."""
    d = _os.fspath(explored.out if isinstance(explored, ExploreResult) else explored)
    return _core.write_report(d, _os.fspath(out) if out is not None else d)


def export(
    plan: Union[Scenario, ExploreResult],
    to: str,
    *,
    rank: int = 1,
    scenario: Optional[Union[str, "_os.PathLike[str]"]] = None,
    out: Optional[Union[str, "_os.PathLike[str]"]] = None,
) -> ExportText:
    """``strata export PLAN_OR_DIR --to megatron|deepspeed|torchtitan``: a
    scenario's plan, or the ``rank``-th best plan of an explore directory (or
    ExploreResult), in the engine's terms. ``out``: also write the text there."""
    override = _os.fspath(scenario) if scenario is not None else ""
    text, unsupported, notes = _core.export(_source(plan, "plan"), to, int(rank), override)
    r = ExportText(text)
    r.unsupported = list(unsupported)
    r.notes = list(notes)
    if out is not None:
        _pathlib.Path(out).write_text(text, encoding="utf-8")
    return r


def import_plan(
    settings: Union[str, "_os.PathLike[str]"],
    engine: str,
    scenario: Scenario,
) -> Result:
    """``strata import FILE --from megatron|deepspeed|torchtitan --scenario
    BASE``: an engine's settings (a file, or their text: Megatron-LM flags, a
    ds_config.json, a torchtitan TOML) read back into a scenario on
    ``scenario``'s model and cluster — the inverse of :func:`export`. The
    result is the scenario as a dict (pass it to :func:`simulate`); its
    ``from_scenario`` and ``ignored`` attributes list what the settings did not
    carry and what is not part of a plan."""
    if isinstance(settings, _os.PathLike) or (isinstance(settings, str) and _os.path.isfile(settings)):
        path, text = _os.fspath(settings), ""
    elif isinstance(settings, str):
        path, text = None, settings
    else:
        raise TypeError(f"settings must be a path or text, not {type(settings).__name__}")
    out, from_base, ignored = _core.import_plan(path, text, engine, _source(scenario))
    r = Result(_json.loads(out), "imported scenario")
    r.from_scenario = list(from_base)
    r.ignored = list(ignored)
    return r


def validate(
    scenario: Union[Scenario, ExploreResult],
    backend: str = "cpu",
    *,
    steps: int = 5,
    calibration: Optional[Union[str, "_os.PathLike[str]"]] = None,
    rank: Optional[int] = None,
) -> Result:
    """``strata validate SCENARIO_OR_DIR --backend cpu|cuda --format json``:
    run the plan on the CPU executor, or (``backend="cuda"``, a module built
    with the CUDA backend: ``strata._core.has_cuda``) on this process's GPU,
    and compare with the prediction. One process validates on one GPU: a
    plan of several GPUs needs ``mpirun -n N strata validate --backend
    cuda``. The calibration is the CLI's: ``calibration``, else the
    scenario's, else the cached one (for the CPU: else measured into the
    cache first; for CUDA: else the bundled estimates, with a warning).
    Releases the GIL; Ctrl-C stops it after the step in flight
    (KeyboardInterrupt)."""
    cal = _os.fspath(calibration) if calibration is not None else ""
    text = _core.validate(_source(scenario), int(rank or 0), backend, int(steps), cal, "json")
    return Result(_json.loads(text), "strata validate")


def _listing(what: str) -> list:
    return [Result(x, what[:-1]) if isinstance(x, Mapping) else x for x in _json.loads(_core.presets(what, "json"))]


def models() -> list:
    """``strata models --format json``: the bundled model presets."""
    return _listing("models")


def gpus() -> list:
    """``strata gpus --format json``: the bundled GPU presets."""
    return _listing("gpus")


def clusters() -> list:
    """``strata clusters --format json``: the bundled cluster presets (``1x<gpu>`` included)."""
    return _listing("clusters")


def stacks() -> list:
    """``strata stacks --format json``: the bundled software stacks and their settings."""
    return _listing("stacks")
