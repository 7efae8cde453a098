"""bench/speculative.py end to end on the tiny reasoner, small: every side runs (off, ngram,
suffix, draft_model with the tiny reasoner drafting for itself), their outputs agree (the bench
fails if not), and the summary carries each figure (not their sizes)."""

import json

from tests.unit.bench.conftest import load_bench


def test_the_bench_runs_both_sides_and_reports(tmp_path, capsys):
    bench = load_bench("speculative")
    out = tmp_path / "spec.json"
    argv = "--model tiny-reasoner --task indist --n 2 --runs 2 --batch 1,2 --max-tokens 40"
    argv += " --methods ngram,suffix,draft_model --draft-model tiny-reasoner"
    argv = [*argv.split(), "--threads", "1", "--json-out", str(out)]
    assert bench.main(argv) == 0
    summary = json.loads(out.read_text())
    assert summary["identical_outputs"] and set(summary["batches"]) == {"1", "2"}
    med = summary["batches"]["1"]["median"]
    assert summary["methods"] == ["ngram", "suffix", "draft_model"]
    for m in ("ngram", "suffix", "draft_model"):
        assert med["off_tok_s"] > 0 and med[f"{m}_tok_s"] > 0
        assert 0 <= med[f"{m}_acceptance"] <= 1 and med[f"{m}_tokens_per_pass"] >= 1
    assert "medians over runs" in capsys.readouterr().out
