import pytest

from pipeline.evals import rg_adapter
from pipeline.evals.tasks import load_problems, score

pytest.importorskip("reasoning_gym")


@pytest.mark.parametrize("name", rg_adapter.KNOWN_TASKS)
def test_loads_deterministically_and_scores_gold(name):
    a = load_problems(f"rg:{name}", 3, seed=11)
    assert [p.question for p in a] == [p.question for p in load_problems(f"rg:{name}", 3, 11)]
    for p in a:
        assert p.family == f"rg:{name}" and p.question and p.answer
        _, s = score(p, f"Answer: {p.answer}\n")
        assert s == 1.0
        _, s = score(p, "no answer at all\n")
        assert s == 0.0


def test_unknown_dataset_fails_clearly():
    with pytest.raises(rg_adapter.ReasoningGymUnavailable):
        rg_adapter.load("rg:no_such_dataset_here", 1, 0)
