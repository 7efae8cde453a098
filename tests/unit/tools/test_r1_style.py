"""R1-style training traces: well-formed in the format, right answers, and no step the
verifier contradicts (the model's mistakes must be its own, not taught)."""

import pytest

from pipeline.evals import answers_match
from pipeline.evals.generators import BROAD_FAMILIES, generate
from pipeline.evals.problems import TRAIN_SEED_BASE
from pipeline.formats import get_format
from pipeline.verify.checker import CONTRADICTED, Checker
from tools.r1_style import r1_trace

R1 = get_format("deepseek_r1")


@pytest.mark.parametrize("family", BROAD_FAMILIES)
def test_traces_are_in_the_format_with_the_gold_answer_and_nothing_false(family):
    problems = generate(family, 60, seed=TRAIN_SEED_BASE + 7, split="train", level="standard")
    for i, p in enumerate(problems):
        trace = r1_trace(p, seed=i)
        prompt = "<|assistant|>"  # the model writes <think> itself in these traces
        parts = R1.split(trace.text, "")
        assert trace.text.startswith("<think>\n") and "</think>" in trace.text
        assert parts.content.startswith("The answer is \\boxed{"), trace.text
        assert answers_match(R1.find_answer(trace.text, prompt), p.answer), trace.text
        checker = Checker(p.premises, p.question)
        for step in R1.strip_markers(trace.text).split("\n\n"):
            verdict = checker.check(step)
            assert verdict.verdict != CONTRADICTED, (step, verdict, trace.text)
            checker.accept(step)


def test_post_answer_thinking_follows_its_knob_and_is_measured():
    problems = generate("arith", 200, seed=TRAIN_SEED_BASE + 8, split="train")
    for knob in (0.0, 0.6, 1.0):
        traces = [r1_trace(p, seed=i, post_answer=knob) for i, p in enumerate(problems)]
        share = sum(t.post_answer_chars > 0 for t in traces) / len(traces)
        assert abs(share - knob) < 0.1, (knob, share)
        for t in traces:
            head = t.text[: t.answer_at]
            assert "answer is" in head.rsplit("\n\n", 1)[-1] or "it's" in head
    assert r1_trace(problems[0], 3) == r1_trace(problems[0], 3)  # a pure function
