import argparse

import pytest

from pipeline.evals import runner
from pipeline.evals.backends import Completion
from pipeline.evals.scoring import score_trace
from pipeline.evals.tasks import load_problems, parse_tasks


def _parse(argv):
    parser = argparse.ArgumentParser()
    runner.add_arguments(parser)
    return parser.parse_args(argv)


def test_defaults():
    args = _parse([])
    assert args.mode == "plain" and args.temperature == 0.7 and args.tasks == "indist"
    assert args.model.endswith("tiny-reasoner")


@pytest.mark.parametrize("mode", ["verify-async", "verify-strict", "budget"])
def test_later_modes_fail_clearly(mode, capsys):
    assert runner.run(_parse(["--mode", mode])) == 2
    assert f"mode {mode} is not available yet" in capsys.readouterr().err


def test_unknown_mode_is_an_argparse_error():
    with pytest.raises(SystemExit):
        _parse(["--mode", "turbo"])


def test_unknown_task_fails_clearly(capsys):
    assert runner.run(_parse(["--tasks", "arith,nope"])) == 2
    assert "unknown task 'nope'" in capsys.readouterr().err


def test_missing_model_fails_clearly(tmp_path, capsys):
    assert runner.run(_parse(["--model", str(tmp_path), "--n", "1"])) == 1
    assert "stepwise eval:" in capsys.readouterr().err


def test_tasks_and_groups():
    assert parse_tasks("indist, rg:chain_sum") == ["indist", "rg:chain_sum"]
    problems = load_problems("indist", 10, 0)
    assert [p.family for p in problems].count("arith") == 3
    assert len(problems) == 10


def test_summary_and_table():
    good = "7 + 8 = 15\nAnswer: 15\n"
    bad = "7 + 8 = 16\nwhat\nAnswer: 16\n"
    rows = [
        (score_trace(good, "15"), 1.0, Completion(good, 12, "stop")),
        (score_trace(bad, "15"), 0.0, Completion(bad, 20, "length")),
    ]
    s = runner.summarize(rows)
    assert s["accuracy"] == 0.5
    assert s["well_formed_rate"] == 4 / 5
    assert s["equation_correct_rate"] == 0.5
    assert s["mean_completion_tokens"] == 16 and s["p95_completion_tokens"] == 20
    assert s["finish_reasons"] == {"stop": 1, "length": 1}
    report = {
        **s,
        "per_family": {"arith": s},
        "wall_s": 1.0,
        "completion_tokens": 32,
        "tokens_per_s": 32.0,
        "engine": "native",
        "mode": "plain",
        "temperature": 0.7,
    }
    table = runner.format_table(report)
    assert "arith" in table and "50.0%" in table
