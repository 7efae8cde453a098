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
    # A full-width id and a full-width answer stay two columns.
    wide = dict(row, id="mo-c92b52-repair-8", answer="x = 4, y = 3")
    assert job_table([wide])[1].startswith("mo-c92b52-repair-8 x = 4, y = 3 ✓")  # whole
    long = dict(row, answer="the integers from 1 to 100 inclusive")
    assert " the integers from 1 to … ✓" in job_table([long])[1]  # cut at 24, marked
    # Ids are shown whole, however long: the column is as wide as the longest.
    ids = ["demo-410929-repair-9", "demo-410929-repair-10"]
    head, *lines = job_table([dict(row, id=i) for i in ids])
    assert [line.split()[0] for line in lines] == ids
    assert len({line.index(" 28 ") for line in lines}) == 1  # the answers line up


def test_the_comparison_shows_what_the_mode_gains_over_verification_off():
    from pipeline.local.demo import batch_row, comparison_table

    def result(i: int, answer: str, wasted: int = 0, repairs: int = 0) -> schema.Result:
        usage = schema.Usage(completion_tokens=100 + wasted, wasted_tokens=wasted, repairs=repairs)
        return schema.Result(id=f"j{i}", status="ok", ts_ms=0, answer=answer, usage=usage)

    golds = {"j0": "28", "j1": "12", "j2": "5", "j3": "9"}
    off = {f"j{i}": result(i, a) for i, a in enumerate(["28", "11", "5", "8"])}
    repair = {f"j{i}": result(i, a, 10, 1) for i, a in enumerate(["28", "12", "5", "8"])}
    rows = [batch_row("off", off, golds, 2.0), batch_row("repair", repair, golds, 4.0)]
    assert rows[0]["accuracy"] == 0.5 and rows[1]["accuracy"] == 0.75
    assert rows[0]["problems_per_s"] == 2.0 and rows[1]["problems_per_s"] == 1.0
    assert rows[1]["wasted_tokens"] == 40 and rows[1]["repairs"] == 4
    lines = comparison_table(rows)
    assert lines[1].split()[:3] == ["off", "50.0%", "2.00"]
    assert lines[2].split()[:3] == ["repair", "75.0%", "1.00"]
    assert "accuracy +25.0 points, 0.50x the problems/s" in lines[-1]
    assert comparison_table(rows[:1]) == []  # nothing to compare: no table


def test_the_demos_verify_mode_is_its_jobs_mode():
    problems = load_problems("broad", 3, 7)
    jobs = demo_jobs(problems, 7, BOXED_INSTRUCTION, verify="off")
    assert {j.params.verify for j in jobs} == {"off"}
    again = demo_jobs(problems, 7, BOXED_INSTRUCTION)
    # The comparison's jobs: the same problems and seeds, other ids.
    assert [j.params.seed for j in jobs] == [j.params.seed for j in again]
    assert not {j.id for j in jobs} & {j.id for j in again}
