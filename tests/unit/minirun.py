"""The shipped mini-run (tests/data/mini-run), copied per test so a test can corrupt it: shared by the
analysis tests and the fail-closed tests, which both edit one file of a real run and check the verdict."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from testbed.records import read_jsonl

MINI = Path(__file__).resolve().parents[1] / "data" / "mini-run"


@pytest.fixture
def run(tmp_path):
    """A private copy of the mini-run folder."""
    dst = tmp_path / "run"
    shutil.copytree(MINI, dst)
    return dst


def edit_json(path: Path, fn):
    path.write_text(json.dumps(fn(json.loads(path.read_text()))))


def rewrite_jsonl(path: Path, fn):
    recs = [fn(r) for r in read_jsonl(path)]
    path.write_text("".join(json.dumps(r) + "\n" for r in recs))


def raw(run, label, k=0):
    return run / label / "raw" / f"rep{k}"
