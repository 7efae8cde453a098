"""bench/verify_quality.py's `MODE+METHOD` modes, small, on the tiny reasoner: the mode with
speculative decoding runs beside the mode without it, gives the same texts, and its speed
ratio is reported."""

import json
import sys

from tests.unit.bench.conftest import load_bench


def test_a_mode_with_speculation_runs_beside_it_and_matches(monkeypatch, capsys):
    bench = load_bench("verify_quality")
    argv = "verify_quality.py --model tiny-reasoner --n 4 --rg-n 0 --batch 2 --max-tokens 60"
    argv += " --modes off,async,async+ngram,async+suffix --temperature 0.7"
    monkeypatch.setattr(sys, "argv", argv.split())
    assert bench.main() == 0
    out = capsys.readouterr().out
    report = json.loads(out.strip().splitlines()[-1])["indist"]
    for m in ("async+ngram", "async+suffix"):
        assert report[f"{m}_vs_async_identical_runs"] == 1  # the same texts as async
        assert report[f"{m}_vs_async_tokens_per_s_ratio"] > 0
        assert f"{m} vs async: tok/s" in out
    assert report["modes"]["async+ngram"]["spec_acceptance"] is not None
    assert report["modes"]["async"]["spec_acceptance"] is None
