"""bench/linear_bf16.py: every side of every shape is timed, and the kernel's ratios printed."""

from __future__ import annotations

import re
import sys

import pytest

from tests.unit.bench.conftest import load_bench


@pytest.fixture(scope="module")
def bench():
    yield load_bench("linear_bf16")
    sys.modules.pop("linear_bf16", None)


def test_prints_each_shape_with_ratios(bench, monkeypatch, capsys):
    monkeypatch.setattr(bench, "SHAPES", {"qkv": (40, 24), "down": (24, 48)})
    assert bench.main(["--runs", "2", "--threads", "1", "--rows", "1,3"]) == 0
    out = capsys.readouterr().out
    assert "the engine uses the kernel:" in out
    rows = [line for line in out.splitlines() if re.match(r"(qkv|down) \d+x\d+, \d rows", line)]
    assert len(rows) == 4
    for line in rows:  # medians (min-max) per side, then a ratio over each other side
        assert len(re.findall(r"\d+ \(\d+-\d+\)", line)) >= 2
        assert re.search(r"\d+\.\d\dx$", line)
