"""Fixtures of the Python module's tests: the repository root and the CLI
built beside the module (STRATA_CLI, set by CTest's python.pytest), whose
output every test compares with."""
import json
import os
import pathlib
import subprocess

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def root():
    return ROOT


@pytest.fixture(scope="session")
def cli():
    path = os.environ.get("STRATA_CLI") or str(ROOT / "build" / "app" / "strata")
    assert os.access(path, os.X_OK), f"the strata CLI to compare with is not at {path} (set STRATA_CLI)"

    def run(*args, check=True, cwd=None):
        p = subprocess.run([path, *map(str, args)], capture_output=True, text=True, cwd=cwd, timeout=600)
        if check:
            assert p.returncode == 0, f"strata {' '.join(map(str, args))} exited {p.returncode}: {p.stderr}"
        return p

    run.path = path
    run.json = lambda *args: json.loads(run(*args, "--format", "json").stdout)
    return run
