"""bench/data/gsm8k: the committed GSM8K problems, the model solutions and their hand labels
line up (pure: no verifier runs here; bench/verify_gsm8k.py scores the set)."""

from __future__ import annotations

import json
import re
from pathlib import Path

from tests.unit.bench.conftest import load_bench

DATA = Path(__file__).resolve().parents[3] / "bench" / "data" / "gsm8k"
MODELS = {"smollm2": "solutions_smollm2.jsonl", "r1-reasoner": "solutions_r1.jsonl"}


def read(name: str) -> list[dict]:
    with open(DATA / name, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def test_the_problems_are_gsm8k_test_lines_with_their_reference_answers():
    problems = read("test_500.jsonl")
    assert [p["id"] for p in problems] == [f"gsm8k-test-{i:04d}" for i in range(500)]
    for p in problems:
        assert p["question"].strip() and re.search(r"\n#### -?[0-9.,]+$", p["answer"]), p["id"]
    # The first line of the GSM8K test split, as published.
    assert problems[0]["question"].startswith("Janet\u2019s ducks lay 16 eggs per day.")
    readme = (DATA / "README.md").read_text()
    assert (
        "openai/grade-school-math" in readme
        and "3101c7d5072418e28b9008a6636bde82a006892c" in readme
    )


def test_every_model_solution_has_one_label_that_indexes_its_steps():
    problem_ids = {p["id"] for p in read("test_500.jsonl")}
    labels = {row["id"]: row for row in read("labels.jsonl")}
    seen = set()
    for model, name in MODELS.items():
        rows = read(name)
        assert len(rows) == 100
        for r in rows:
            assert r["model"] == model and r["problem_id"] in problem_ids
            assert r["steps"] and all(s.strip() for s in r["steps"])
            label = labels[r["id"]]
            assert -1 <= label["first_wrong"] < len(r["steps"]), r["id"]
            assert isinstance(label["answer_correct"], bool) and label["note"].strip()
            seen.add(r["id"])
    assert seen == set(labels)


def test_the_labels_are_mostly_wrong_solutions_as_a_small_model_writes():
    labels = read("labels.jsonl")
    right = [lab for lab in labels if lab["first_wrong"] < 0]
    assert 0 < len(right) < 10 and len(labels) == 200


def test_the_bench_scores_processbench_style():
    bench = load_bench("verify_gsm8k")
    flag = frozenset({"contradicted"})

    def row(verdicts, first_wrong, right=True):
        claims = [["entailed"] if v == "entailed" else [] for v in verdicts]
        return {"steps": verdicts, "verdicts": verdicts, "claims": claims,
                "first_wrong": first_wrong, "answer_correct": right}  # fmt: skip

    wrong = [row(["entailed", "contradicted"], 1), row(["contradicted", "no_claim"], 1),
             row(["no_claim", "entailed"], 0)]  # fmt: skip
    correct = [row(["entailed", "no_claim"], -1), row(["entailed", "contradicted"], -1)]
    f = bench.score(wrong, correct, flag)
    assert f["caught"] == 1 / 3 and f["first_flag_exact"] == 1 / 3
    assert f["right_unflagged"] == 1 / 2
    assert abs(f["f1"] - 200 * (1 / 3) * (1 / 2) / (1 / 3 + 1 / 2)) < 1e-9
    # right steps: those before each first wrong step; one of the two is flagged (a false
    # contradiction)
    assert (f["right_steps"], f["false_count"], f["checked_count"]) == (2, 1, 1)
    assert bench.reference_steps("So 2 * 3 = <<2*3=6>>6.\n#### 6", plain=True) == [
        "So 2 * 3 = 6.",
        "#### 6",
    ]
