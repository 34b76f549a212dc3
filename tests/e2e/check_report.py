#!/usr/bin/env python3
"""End-to-end checks of `strata report` (docs/report.md).

Usage: check_report.py STRATA MODE [SCREENSHOT_SCRIPT]
  MODE cli:     a small explore (written here: GPT-2 on 8 H100 with a model
                name full of markup, 48 plans with pipeline stages), then
                `strata report`: the three files, one CSV row per scored plan,
                the same bytes twice, a bad directory rejected with nothing
                written.
  MODE browser: the same report loaded in headless Chromium: no console
                error, the script's ready marker set and its error marker
                not, at least four inline SVG charts each with drawn shapes,
                the hostile model name shown as text; then a screenshot with
                SCREENSHOT_SCRIPT. Exits 77 (skipped) without Chromium.
"""
import html.parser
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

HOSTILE = "<script>window.pwned=1</script>\"&'\u0007x"

SCENARIO = {
    "model": {"preset": "gpt2-124m", "name": "gpt2 " + HOSTILE},
    "cluster": "dgx-h100",
    "batch": {"global": 32, "micro": 1},
    "plan": {"optimizer": "adamw", "precision": "bf16"},
    # 3 pp · 2 schedules · 2 recompute · 2 zero · 2 micro = 48 plans.
    "space": {"pp": [1, 2, 4], "schedule": ["gpipe", "1f1b"], "recompute": ["none", "full"],
              "zero": [0, 1], "batch.micro": [1, 2]},
}


def fail(msg):
    sys.exit("FAILED: " + msg)


def check(cond, msg):
    if not cond:
        fail(msg)


def run(*args, rc=0):
    p = subprocess.run([STRATA, *args], capture_output=True, text=True)
    if p.returncode != rc:
        fail(f"strata {' '.join(args)}: exit {p.returncode}, expected {rc}\n{p.stdout[:2000]}\n{p.stderr}")
    return p


def read(path, mode="r"):
    with open(path, mode) as f:
        return f.read()


def explore_and_report(tmp):
    sc = os.path.join(tmp, "scenario.json")
    with open(sc, "w") as f:
        json.dump(SCENARIO, f)
    d = os.path.join(tmp, "explore")
    out = json.loads(run("explore", sc, "--out", d, "--jobs", "2", "--format", "json").stdout)
    scored = out["counts"]["scored"]
    check(scored > 0, "some plans scored")
    # explore writes the report and a copy of its scenario into DIR.
    for name in ("report.html", "report.md", "results.csv", "scenario.json"):
        check(os.path.isfile(os.path.join(d, name)), f"explore wrote {name}")
    check(read(os.path.join(d, "scenario.json")) == read(sc), "DIR/scenario.json is the scenario")
    return d, scored


class Svgs(html.parser.HTMLParser):
    """Counts, per <svg>, the shapes drawn inside it."""

    def __init__(self):
        super().__init__()
        self.svgs = []  # per svg: {tag: count}
        self.depth = 0
        self.html_attrs = {}
        self.text = []

    def handle_starttag(self, tag, attrs):
        if tag == "html":
            self.html_attrs = dict(attrs)
        if tag == "svg":
            self.svgs.append({})
            self.depth += 1
        elif self.depth:
            a = dict(attrs)
            drawn = tag in ("rect", "circle", "polyline") or (tag == "path" and a.get("d"))
            if drawn:
                self.svgs[-1][tag] = self.svgs[-1].get(tag, 0) + 1

    def handle_endtag(self, tag):
        if tag == "svg":
            self.depth -= 1

    def handle_data(self, data):
        self.text.append(data)


def mode_cli(tmp):
    d, scored = explore_and_report(tmp)
    r1 = os.path.join(tmp, "r1")
    p = run("report", d, "--out", r1)
    check("report.html" in p.stdout, f"report prints where it wrote: {p.stdout!r}")
    for name in ("report.html", "report.md", "results.csv"):
        check(os.path.getsize(os.path.join(r1, name)) > 0, f"{name} written")
    csv = read(os.path.join(r1, "results.csv"), "rb").decode()
    rows = csv.split("\r\n")
    check(rows[-1] == "" and len(rows) - 2 == scored, f"{len(rows) - 2} CSV rows for {scored} plans")
    check(rows[0].startswith("plan_id,batch_global,batch_micro,dp,tp,pp,"), "CSV header")
    # Deterministic: the same directory gives the same bytes; explore's own
    # report is the same as well.
    r2 = os.path.join(tmp, "r2")
    run("report", d, "--out", r2)
    for name in ("report.html", "report.md", "results.csv"):
        a = read(os.path.join(r1, name), "rb")
        check(a == read(os.path.join(r2, name), "rb"), f"{name}: same bytes twice")
        check(a == read(os.path.join(d, name), "rb"), f"{name}: explore wrote the same")
    page = read(os.path.join(r1, "report.html"))
    check("<script>window.pwned" not in page, "the model name is escaped in the HTML")
    check("&lt;script&gt;window.pwned=1&lt;/script&gt;&quot;&amp;&#39;\\x07x" in page,
          "the model name appears as text")
    md = read(os.path.join(r1, "report.md"))
    check("<script>" not in md and "&lt;script&gt;window.pwned" in md, "the model name is escaped in Markdown")
    check(md.count("\u0007") == 0, "no control character in the Markdown")
    check("## Technique by technique" in md and "### recompute" in md, "technique comparison")
    check("Timeline of the best plan" in md and "No timeline" not in md, "timeline replayed")
    # The report's Pareto front and winner are the explorer's.
    with open(os.path.join(d, "summary.json")) as f:
        summary = json.load(f)
    check(f"\n{summary['counts']['pareto']} plans, by step time" in md,
          f"Pareto front of {summary['counts']['pareto']} plans")
    check(f"Plan {summary['top'][0]['plan_id']} (" in md, "the winner is the explorer's top plan")
    # A directory that is not an explore output: exit 2, nothing written.
    bad = os.path.join(tmp, "bad")
    os.mkdir(bad)
    p = run("report", bad, "--out", os.path.join(tmp, "nothing"), rc=2)
    check("summary.json: file not found" in p.stderr and p.stdout == "", f"bad DIR: {p.stderr!r}")
    check(not os.path.exists(os.path.join(tmp, "nothing")), "nothing written for a bad DIR")
    run("report", os.path.join(tmp, "missing"), rc=2)


def find_browser():
    for b in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(b)
        if path:
            return path
    return None


def mode_browser(tmp, screenshot_script):
    browser = find_browser()
    if not browser:
        print("SKIP: no chromium (scripts/setup.sh installs it)")
        sys.exit(77)
    d, _ = explore_and_report(tmp)
    page = os.path.join(d, "report.html")
    profile = os.path.join(tmp, "profile")
    p = subprocess.run(
        [browser, "--headless", "--no-sandbox", "--disable-gpu", "--user-data-dir=" + profile,
         "--enable-logging=stderr", "--v=0", "--virtual-time-budget=5000", "--dump-dom",
         "file://" + page],
        capture_output=True, text=True, timeout=120)
    check(p.returncode == 0, f"chromium exit {p.returncode}: {p.stderr[-2000:]}")
    console = [l for l in p.stderr.splitlines() if "CONSOLE" in l or "Uncaught" in l]
    check(not console, "console messages:\n" + "\n".join(console))
    dom = p.stdout
    parser = Svgs()
    parser.feed(dom)
    attrs = parser.html_attrs
    check(attrs.get("data-report-ready") == "1", f"ready marker set by the script: {attrs}")
    check("data-report-error" not in attrs, "no script error")
    check(re.search(r'<th[^>]*tabindex="0"', dom) is not None, "the sorting script made headings focusable")
    check(len(parser.svgs) >= 4, f"{len(parser.svgs)} SVG charts, expected at least 4")
    for i, shapes in enumerate(parser.svgs):
        check(sum(shapes.values()) > 0, f"SVG {i} draws nothing")
    text = "".join(parser.text)
    check("<script>window.pwned=1</script>" in text, "the hostile model name is shown as text")
    check("window.pwned" not in "".join(attrs.values()), "no injected script ran")
    print(f"{len(parser.svgs)} charts: " + "; ".join(
        ", ".join(f"{n} {t}" for t, n in sorted(s.items())) for s in parser.svgs))
    if screenshot_script:
        png = os.path.join(tmp, "report.png")
        s = subprocess.run([screenshot_script, page, png], capture_output=True, text=True, timeout=120)
        check(s.returncode == 0, f"screenshot: {s.stderr}")
        check(read(png, "rb")[:8] == b"\x89PNG\r\n\x1a\n", "screenshot is a PNG")
        print(f"screenshot {os.path.getsize(png)} bytes")


def main():
    tmp = tempfile.mkdtemp(prefix="strata-e2e-report-")
    try:
        if MODE == "cli":
            mode_cli(tmp)
        elif MODE == "browser":
            mode_browser(tmp, sys.argv[3] if len(sys.argv) > 3 else None)
        else:
            fail("mode must be cli or browser")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print("ok")


if __name__ == "__main__":
    STRATA, MODE = sys.argv[1], sys.argv[2]
    main()
