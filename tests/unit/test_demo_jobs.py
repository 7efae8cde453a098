"""`stepwise demo`'s jobs: the tiny reasoner's prompt line, or a chat message asking for the
answer as the model's format states it; the first job streams tokens (shown live)."""

from __future__ import annotations

from pipeline import schema
from pipeline.evals.runner import BOXED_INSTRUCTION, answer_instruction
from pipeline.evals.tasks import load_problems
from pipeline.formats import get_format
from pipeline.local.demo import demo_jobs


def test_chat_models_get_messages_with_the_formats_instruction():
    problems = load_problems("broad", 7, 7)
    instruction = answer_instruction(get_format("qwen3"))
    assert instruction == BOXED_INSTRUCTION
    jobs = demo_jobs(problems, 7, instruction)
    assert [j.params.stream for j in jobs] == ["tokens"] + ["steps"] * 6
    # A burst is a batch's load: only the job shown live is interactive (docs/budget.md).
    assert [j.slo.class_ for j in jobs] == ["interactive"] + ["batch"] * 6
    assert {j.params.verify for j in jobs} == {"repair"}  # wrong values replaced as written
    assert len({j.id for j in jobs}) == 7 and all(j.prompt is None for j in jobs)
    for job, p in zip(jobs, problems, strict=True):
        (m,) = job.messages
        assert m.role == "user" and m.content == f"{p.question}\n{BOXED_INSTRUCTION}"
        assert job.premises == list(p.premises) and job.params.seed is not None
    # Valid on the wire: what the broker carries decodes back to the same Job.
    assert schema.decode(schema.encode(jobs[0]), schema.Job) == jobs[0]


def test_the_tiny_reasoner_gets_its_own_prompt_line():
    (p,) = load_problems("arith", 1, 3)
    (job,) = demo_jobs([p], 3, None)
    assert job.messages is None and job.prompt == " ".join(p.question.split())


def test_the_summary_shows_each_jobs_contradicted_claims_and_backtracks():
    from pipeline.local.demo import job_row, job_table

    steps = [schema.StepRecord(text="4 * 7 = 28", verdict="entailed"),
             schema.StepRecord(text="So the answer is 28.", verdict="no_claim")]  # fmt: skip
    result = schema.Result(
        id="demo-abc-0", status="ok", ts_ms=0, answer="28", steps=steps,
        usage=schema.Usage(backtracks=2), budget=schema.BudgetReport(stop_reason="answer"),
        verification=schema.VerificationReport(
            status="partial", checks=4, claims=4, entailed=2, contradicted=2, steps=2,
            steps_checkable=1, checkable_share=0.5),
    )  # fmt: skip
    row = job_row(result, "28")
    assert row["correct"] and row["backtracks"] == 2 and row["contradicted_claims"] == 2
    assert row["entailed"] == 1 and row["nothing_to_check"] == 1  # not counted as verified
    head, line = job_table([row])
    assert "contr." in head and "backtr." in head and "no claim" in head
    assert line.split()[:9] == ["demo-abc-0", "28", "✓", "2", "1", "1", "2", "0", "2"]
