#!/usr/bin/env python3
"""Hostile names through every output: a model, GPU and cluster named with
markup, quotes, a backslash, a newline, a pipe, a comma and control
characters (\\u0001, an ANSI escape \\u001b[31m) go through `strata simulate`
(table, JSON, CSV, --trace), `strata explore` (table, CSV, JSON and the files
it writes: results.jsonl, summary.json, report.html, report.md, results.csv),
`strata report` and `strata export`; an unknown preset with such a name goes
to stderr. Each output must stay well-formed for its format:

  terminal text   no control character but newlines, and the name on one line
  JSON            parses (strict: no raw control character), names round-trip
  CSV             the csv module reads rows as wide as the header
  HTML            no unescaped <script>; the name is there, escaped
  Markdown        table rows keep their cell count (no unescaped |), no raw
                  control character or newline inside a row, no raw <script>
  exports         the name only in comment lines, without control characters

    check_hostile.py STRATA
"""
import csv
import io
import json
import os
import re
import subprocess
import sys
import tempfile

HOSTILE = "<script>alert(1)</script> \"q\" 'a' back\\slash\nline2 | pipe, comma \u0001 \u001b[31mred"
MODEL, GPU, CLUSTER = "M " + HOSTILE, "G " + HOSTILE, "C " + HOSTILE

failures = []


def check(ok, what):
    print(("ok   " if ok else "FAIL ") + what)
    if not ok:
        failures.append(what)


def run(strata, *args, expect_rc=0):
    p = subprocess.run([strata, *args], capture_output=True, timeout=300)
    if p.returncode != expect_rc:
        sys.exit(f"FAIL strata {' '.join(args)}: exit {p.returncode}, expected {expect_rc}\n"
                 f"{p.stderr.decode(errors='replace')}")
    return p.stdout.decode(), p.stderr.decode()


def controls(text, allowed="\n"):
    return sorted({f"\\x{ord(c):02x}" for c in text if (ord(c) < 0x20 or ord(c) == 0x7F) and c not in allowed})


def check_terminal(text, what):
    check(not controls(text), f"{what}: no control character but newlines {controls(text)}")
    check(not any(line.startswith("line2") for line in text.splitlines()),
          f"{what}: the name's newline does not start a line")


def check_csv(text, what):
    rows = list(csv.reader(io.StringIO(text, newline="")))
    widths = {len(r) for r in rows if r}
    check(len(rows) > 1 and len(widths) == 1, f"{what}: CSV rows as wide as the header ({widths})")


def strings(value):
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for k, v in value.items():
            yield k
            yield from strings(v)
    elif isinstance(value, list):
        for v in value:
            yield from strings(v)


def check_json(text, what, names=()):
    try:
        data = json.loads(text)  # strict: a raw control character in a string fails
    except ValueError as e:
        check(False, f"{what}: JSON parses ({e})")
        return None
    found = set(strings(data))
    check(all(n in found for n in names), f"{what}: JSON parses and the names round-trip")
    return data


def check_html(text, what):
    check("<script>alert(1)</script>" not in text, f"{what}: no unescaped <script>alert")
    check("&lt;script&gt;alert(1)&lt;/script&gt;" in text, f"{what}: the name is there, escaped")
    check(not controls(text, "\n\t"), f"{what}: no control character")


def check_markdown(text, what):
    check("<script>" not in text, f"{what}: no raw <script>")
    check(not controls(text), f"{what}: no control character")
    lines = text.splitlines()
    bad = []
    for i, line in enumerate(lines):
        if not line.startswith("|"):
            continue
        if i > 0 and lines[i - 1].startswith("|"):
            continue  # checked with its table's first row
        table = [line]
        for nxt in lines[i + 1:]:
            if not nxt.startswith("|"):
                break
            table.append(nxt)
        cells = {len(re.findall(r"(?<!\\)\|", row)) for row in table}
        if len(cells) != 1 or not all(row.rstrip().endswith("|") for row in table):
            bad.append(table[0][:60])
    check(not bad, f"{what}: every table row keeps its cells {bad}")


def check_export(text, what, comment):
    lines = [line for line in text.splitlines() if "alert" in line or "line2" in line]
    check(bool(lines) and all(line.lstrip().startswith(comment) for line in lines),
          f"{what}: the name only in {comment} comments")
    check(not controls(text), f"{what}: no control character")


def main():
    strata = sys.argv[1]
    with tempfile.TemporaryDirectory() as tmp:
        scenario = os.path.join(tmp, "hostile.json")
        with open(scenario, "w") as f:
            json.dump({"model": {"preset": "gpt2-124m", "name": MODEL},
                       "cluster": {"preset": "dgx-h100", "name": CLUSTER,
                                   "gpu": {"preset": "h100-sxm", "name": GPU}},
                       "batch": {"global": 64, "micro": 1},
                       "plan": {"optimizer": "adamw", "precision": "bf16"},
                       "space": {"tp": [1, 2], "zero": [0, 1]}}, f)

        out, _ = run(strata, "simulate", scenario)
        check_terminal(out, "simulate table")
        out, _ = run(strata, "simulate", scenario, "--format", "json")
        check_json(out, "simulate json", [MODEL])
        out, _ = run(strata, "simulate", scenario, "--format", "csv")
        check_csv(out, "simulate csv")
        trace = os.path.join(tmp, "trace.json")
        run(strata, "simulate", scenario, "--trace", trace)
        with open(trace, encoding="utf-8") as f:
            check_json(f.read(), "simulate --trace")
        out, _ = run(strata, "describe", scenario)
        check_terminal(out, "describe table")

        # A file name that is not UTF-8 (a Latin-1 name): the JSON outputs
        # name it with the byte written \xff, as the tables show it; every
        # command finishes (before: an internal error, and explore left a
        # directory without summary.json).
        latin1 = os.path.join(os.fsencode(tmp), b"caf\xe9.json")
        with open(latin1, "wb") as f, open(scenario, "rb") as g:
            f.write(g.read())
        out, _ = run(strata, "simulate", os.fsdecode(latin1), "--format", "json")
        check(json.loads(out)["scenario"].endswith("caf\\xe9.json"), "simulate json: a Latin-1 file name, escaped")
        d = os.path.join(tmp, "latin1-out")
        run(strata, "explore", os.fsdecode(latin1), "--out", d, "--jobs", "1")
        with open(os.path.join(d, "summary.json"), encoding="utf-8") as f:
            check(json.load(f)["scenario"].endswith("caf\\xe9.json"), "explore of a Latin-1 file name: summary.json")
        run(strata, "explore", os.fsdecode(latin1), "--out", d, "--resume", "--jobs", "1")

        # A layer-chain model's header line (describe, tradeoff), escaped as
        # its rows are; a bidirectional override too. Before: printed raw.
        chain_name = "=HYPERLINK(\"http://x\")\u202e\u001b[2J " + HOSTILE
        chain = os.path.join(tmp, "chain.json")
        with open(chain, "w") as f:
            json.dump({"model": {"name": chain_name, "chain": {"input_bytes": 10**6, "layers": [{"repeat": 4, "layers": [
                {"name": "l", "fwd_flops": 10**9, "params": 1000, "output_bytes": 10**6, "saved_bytes": 5 * 10**5}]}]}},
                "cluster": "1xa100-80g", "batch": {"global": 1, "micro": 1}}, f)
        for args in (("describe", chain), ("tradeoff", chain, "--budgets", "2")):
            out, _ = run(strata, *args)
            check_terminal(out, f"{args[0]} of a layer chain")
            check("\u202e" not in out and "\\u{202e}" in out, f"{args[0]} of a layer chain: the bidi override escaped")

        explored = {}
        for fmt in ("table", "csv", "json"):
            d = os.path.join(tmp, "out-" + fmt)
            out, err = run(strata, "explore", scenario, "--out", d, "--jobs", "1", "--format", fmt)
            explored[fmt] = d
            check(not controls(err), f"explore {fmt}: stderr without control characters")
            if fmt == "table":
                check_terminal(out, "explore table")
            elif fmt == "csv":
                check_csv(out, "explore csv")
            else:
                check_json(out, "explore json", [MODEL, GPU])
        d = explored["table"]
        with open(os.path.join(d, "results.jsonl"), encoding="utf-8") as f:
            lines = f.read().splitlines()
        parsed = [json.loads(line) for line in lines]
        check(len(parsed) == 4 and all(r["plan_id"] for r in parsed), "results.jsonl: every line parses")
        with open(os.path.join(d, "summary.json"), encoding="utf-8") as f:
            check_json(f.read(), "summary.json", [MODEL, GPU])
        for name in ("report.html", "report.md", "results.csv"):
            with open(os.path.join(d, name), encoding="utf-8", newline="") as f:
                text = f.read()
            {"report.html": check_html, "report.md": check_markdown, "results.csv": check_csv}[name](text, name)

        out, _ = run(strata, "report", d)
        for name, fn in (("report.html", check_html), ("report.md", check_markdown)):
            with open(os.path.join(d, name), encoding="utf-8") as f:
                fn(f.read(), "strata report: " + name)

        out, err = run(strata, "export", d, "--to", "megatron")
        check_export(out, "export megatron", "#")
        check(not controls(err), "export megatron: stderr without control characters")
        # The directory's best plan is ZeRO-1, which torchtitan cannot launch
        # (its FSDP shards gradients too): the scenario's own plan (ZeRO-0, DDP).
        out, _ = run(strata, "export", scenario, "--to", "torchtitan")
        check_export(out, "export torchtitan", "#")
        out, _ = run(strata, "export", d, "--to", "deepspeed")
        check_json(out, "export deepspeed")

        # An unknown preset named like that (without '/': a file path otherwise):
        # the message quotes it on stderr.
        bad = os.path.join(tmp, "bad.json")
        with open(bad, "w") as f:
            json.dump({"model": HOSTILE.replace("/", ""), "cluster": "1xa100-80g", "batch": {"global": 8}}, f)
        out, err = run(strata, "simulate", bad, expect_rc=2)
        check(out == "" and "unknown model preset" in err, "unknown preset: exit 2, the rule on stderr")
        check(not controls(err), f"unknown preset: stderr without control characters {controls(err)}")

    if failures:
        sys.exit(f"{len(failures)} check(s) failed")


if __name__ == "__main__":
    main()
