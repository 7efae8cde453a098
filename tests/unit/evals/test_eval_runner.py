import argparse

import pytest

from pipeline.cli.parser import add_eval_args
from pipeline.evals import runner
from pipeline.evals.completers import Completion, EngineCompleter
from pipeline.evals.scoring import score_trace
from pipeline.evals.tasks import load_problems, parse_tasks


def _parse(argv):
    parser = argparse.ArgumentParser()
    add_eval_args(parser)
    return parser.parse_args(argv)


def test_defaults():
    args = _parse([])
    assert args.mode == "plain" and args.temperature == 0.7 and args.tasks == "indist"
    assert args.model.endswith("tiny-reasoner")


def test_the_budget_mode_forces_answers(capsys):
    args = ["--mode", "budget", "--max-thinking-tokens", "6", "--n", "4", "--tasks", "linear"]
    assert runner.run(_parse(args)) == 0
    assert "stop reasons {'budget': 4}" in capsys.readouterr().out


def test_a_verify_mode_runs_with_its_checker_process(capsys):
    assert runner.run(_parse(["--mode", "verify-strict", "--n", "4", "--tasks", "arith"])) == 0
    out = capsys.readouterr().out
    assert "mode verify-strict" in out and "checks " in out and "backtracks" in out


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


class _StubEngine:
    """Just enough of pipeline.engine.Engine for EngineCompleter: echo, context of 10 tokens."""

    max_model_len = 10

    def encode_prompt(self, prompt):
        return list(range(len(prompt)))

    def generate(self, prompts, params):
        from types import SimpleNamespace

        return [
            SimpleNamespace(
                text=f"len {len(p)} seed {sp.seed}", token_ids=[1, 2], finish_reason="stop"
            )
            for p, sp in zip(prompts, params, strict=True)
        ]


def test_engine_completer_skips_prompts_that_do_not_fit():
    backend = EngineCompleter.__new__(EngineCompleter)
    backend.engine = _StubEngine()
    outs = backend.generate(["abc", "x" * 10, "abcdefghi"], 0.7, 5, [7, 8, 9])
    assert [o.finish_reason for o in outs] == ["stop", "prompt_too_long", "stop"]
    assert outs[0].text == "len 3 seed 7" and outs[2].text == "len 9 seed 9"
    assert outs[1].num_tokens == 0 and outs[1].text == ""
