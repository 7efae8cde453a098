"""`stepwise eval` end to end on a small n with the bundled tiny reasoner (CI smoke test)."""

import importlib.util
import json

import pytest

from pipeline.cli.parser import build_parser
from pipeline.evals import runner

pytestmark = pytest.mark.slow


def test_eval_runner_smoke(tmp_path, capsys):
    out = tmp_path / "eval.json"
    tasks = "indist"
    if importlib.util.find_spec("reasoning_gym") is not None:
        tasks += ",rg:basic_arithmetic"
    argv = ["--tasks", tasks, "--n", "8", "--seed", "1", "--max-tokens", "128", "--out", str(out)]
    rc = runner.run(build_parser().parse_args(["eval", *argv]))
    assert rc == 0
    table = capsys.readouterr().out
    assert "all" in table and "tok/s" in table
    report = json.loads(out.read_text())
    n_tasks = len(tasks.split(","))
    assert report["num_problems"] == 8 * n_tasks
    for key in ("accuracy", "well_formed_rate", "equation_correct_rate"):
        assert 0.0 <= report[key] <= 1.0
    assert report["mean_completion_tokens"] > 0
    assert report["p95_completion_tokens"] >= report["mean_completion_tokens"] * 0.5
    assert report["mean_steps"] > 0
    assert report["wall_s"] > 0 and report["tokens_per_s"] > 0
    assert set(report["per_family"]) >= {"arith", "linear", "system", "word"}
    # The model writes the step format: most of its lines are well-formed.
    assert report["well_formed_rate"] > 0.5
