"""`stepwise demo`: held-out problems through the running pipeline: the first one streamed live
(the thinking as it is written, each step's claims marked with their verdicts, the answer apart
from the thinking), then the rest at once, then a summary table."""

from __future__ import annotations

import asyncio
import statistics
import sys
import tempfile
import time
import uuid
from collections import Counter

from rich.console import Console
from rich.live import Live
from tqdm import tqdm

from pipeline import schema, settings
from pipeline.client import StepwiseClient
from pipeline.client.stream_view import StreamView
from pipeline.config import PipelineConfig
from pipeline.evals import answers_match
from pipeline.evals.runner import answer_instruction, chat_content
from pipeline.evals.tasks import load_problems
from pipeline.formats import format_for
from pipeline.local.stack import Stack
from pipeline.models.resolve import resolve_model


def _pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    values = sorted(values)
    return values[min(len(values) - 1, int(round(q * (len(values) - 1))))]


def problem_job(p, job_id: str, params: schema.JobParams, instruction: str | None) -> schema.Job:
    """A Job for one problem: the tiny reasoner's prompt line, or (`instruction`, from
    `answer_instruction`) a chat message asking for the answer as the model's format states
    it."""
    if instruction is None:
        text: dict = {"prompt": " ".join(p.question.split())}
    else:
        text = {"messages": [schema.Message(role="user", content=chat_content(p, instruction))]}
    return schema.Job(id=job_id, premises=list(p.premises), params=params, **text)


# Verify mode repair: a wrong arithmetic value is replaced as it is written (issue 35: on the
# R1-style reasoner more accurate than async at a fraction of its discards).
DEFAULT_VERIFY = "repair"


def demo_jobs(
    problems, seed: int, instruction: str | None, verify: str = DEFAULT_VERIFY
) -> list[schema.Job]:
    """The demo's jobs: the first streams tokens (it is shown live, an interactive job), the
    rest steps. They are sent at once, a batch's load: the batch class (its SLO is minutes,
    docs/budget.md), so the budget controller does not cut or refuse a burst it can serve."""
    tag = uuid.uuid4().hex[:6]
    jobs = []
    for i, p in enumerate(problems):
        params = schema.JobParams(
            temperature=0.7, seed=seed + i, max_tokens=768, verify=verify,
            stream="tokens" if i == 0 else "steps",
        )  # fmt: skip
        job = problem_job(p, f"demo-{tag}-{verify}-{i}", params, instruction)
        job.slo = schema.SLO(class_="interactive" if i == 0 else "batch")
        jobs.append(job)
    return jobs


async def stream_one(client: StepwiseClient, job: schema.Job, title: str) -> schema.Result | None:
    """Submit one job and render it live as its events come (rich; on a terminal it redraws,
    elsewhere the final view is printed once)."""

    view = StreamView(title)
    result = None
    await client.submit(job)
    with Live(view, console=Console(), refresh_per_second=8) as live:
        async for msg in client.follow({job.id}, timeout_s=600):
            view.apply(msg)
            live.refresh()
            if isinstance(msg, schema.Result):
                result = msg
    return result


async def run_batch(
    client: StepwiseClient, jobs: list[schema.Job], desc: str
) -> tuple[dict[str, schema.Result], float]:
    """Send `jobs` at once and wait for all their Results (a progress bar on stderr); returns
    them by id, with the wall time from the first send to the last Result."""
    results: dict[str, schema.Result] = {}
    t0 = time.perf_counter()
    await client.submit_many(jobs)
    with tqdm(total=len(jobs), desc=desc, unit="job", file=sys.stderr) as bar:
        async for msg in client.follow({j.id for j in jobs}, timeout_s=600):
            if isinstance(msg, schema.Result):
                results[msg.id] = msg
                bar.update(1)
    return results, time.perf_counter() - t0


def batch_row(mode: str, results: dict[str, schema.Result], golds: dict[str, str],
              wall: float) -> dict:  # fmt: skip
    """One mode's line of the comparison: accuracy over the jobs sent, problems/s, tokens."""
    ok = [r for r in results.values() if r.status == "ok"]
    correct = sum(answers_match(r.answer, golds[r.id]) for r in ok)
    return {
        "mode": mode,
        "jobs": len(golds),
        "accuracy": correct / len(golds) if golds else 0.0,
        "problems_per_s": len(ok) / wall if wall > 0 else 0.0,
        "mean_completion_tokens": statistics.fmean(r.usage.completion_tokens for r in ok)
        if ok
        else 0.0,
        "wasted_tokens": sum(r.usage.wasted_tokens for r in ok),
        "repairs": sum(r.usage.repairs for r in ok),
        "backtracks": sum(r.usage.backtracks for r in ok),
    }


async def run_demo(
    kafka: str, prefix: str, n: int, seed: int, tasks: str = "indist",
    instruction: str | None = None, verify: str = DEFAULT_VERIFY, compare: bool = True,
) -> dict:  # fmt: skip
    """The demo's run: one job streamed live, the rest as a burst; with `compare` (and a mode
    other than off), the same burst again with verification off, for what the mode gains."""
    problems = load_problems(tasks, n, seed)
    made = demo_jobs(problems, seed, instruction, verify)
    jobs = {job.id: (p, job) for p, job in zip(problems, made, strict=True)}
    results: dict[str, schema.Result] = {}
    (first_id, (first_p, first_job)), rest = next(iter(jobs.items())), list(jobs)[1:]
    comparison: list[dict] = []
    t0 = time.perf_counter()
    async with StepwiseClient(kafka, prefix) as client:
        title = f"{first_p.question}  (gold: {first_p.answer})"
        got = await stream_one(client, first_job, title)
        if got is not None:
            results[first_id] = got
        burst, burst_wall = await run_batch(client, [jobs[j][1] for j in rest], f"jobs ({verify})")
        results.update(burst)
        wall = time.perf_counter() - t0
        if compare and verify != "off" and rest:
            golds = {j: jobs[j][0].answer for j in rest}
            comparison.append(batch_row(verify, burst, golds, burst_wall))
            # The same problems and seeds, verification off: what the mode costs and gains.
            off = demo_jobs(problems, seed, instruction, "off")[1:]
            off_golds = {o.id: p.answer for o, p in zip(off, problems[1:], strict=True)}
            got_off, off_wall = await run_batch(client, off, "jobs (off, for comparison)")
            comparison.insert(0, batch_row("off", got_off, off_golds, off_wall))
    ok = [r for r in results.values() if r.status == "ok"]
    correct = sum(answers_match(r.answer, jobs[r.id][0].answer) for r in ok)
    e2e = [float(r.timings.e2e_ms) for r in ok if r.timings.e2e_ms is not None]
    tokens = [r.usage.completion_tokens for r in ok]
    verdicts = Counter(s.verdict for r in ok for s in r.steps)
    claims = Counter(c.verdict for r in ok for s in r.steps for c in s.claims)
    per_job = [job_row(results[j], jobs[j][0].answer) for j in jobs if j in results]
    return {
        "verify": verify,
        "jobs": len(jobs),
        "ok": len(ok),
        "accuracy": correct / len(jobs) if jobs else 0.0,
        "e2e_ms_p50": _pct(e2e, 0.5),
        "e2e_ms_p95": _pct(e2e, 0.95),
        "e2e_ms_p99": _pct(e2e, 0.99),
        "mean_completion_tokens": statistics.fmean(tokens) if tokens else 0.0,
        "jobs_per_s": len(ok) / wall,
        "tokens_per_s": sum(tokens) / wall,
        "wall_s": wall,
        "backtracks": sum(r.usage.backtracks for r in ok),
        "repairs": sum(r.usage.repairs for r in ok),
        "wasted_tokens": sum(r.usage.wasted_tokens for r in ok),
        "gave_up": sum(r.budget.stop_reason == "unverified" for r in ok),
        "verdicts": dict(verdicts),
        "claims": dict(claims),
        "per_job": per_job,
        "comparison": comparison,
    }


def comparison_table(rows: list[dict]) -> list[str]:
    """Verification off against the demo's mode on the same burst: accuracy, problems/s,
    tokens, and the gain in one line."""
    if len(rows) < 2:
        return []
    lines = [f"{'mode':<8}{'accuracy':>9}{'problems/s':>12}{'tokens':>8}{'discarded':>10}"
             f"{'repairs':>8}{'backtracks':>11}"]  # fmt: skip
    for r in rows:
        lines.append(
            f"{r['mode']:<8}{r['accuracy']:>9.1%}{r['problems_per_s']:>12.2f}"
            f"{r['mean_completion_tokens']:>8.1f}{r['wasted_tokens']:>10}{r['repairs']:>8}"
            f"{r['backtracks']:>11}"
        )
    off, mode = rows[0], rows[-1]
    speed = mode["problems_per_s"] / off["problems_per_s"] if off["problems_per_s"] else 0.0
    gain = 100 * (mode["accuracy"] - off["accuracy"])
    lines.append(
        f"{mode['mode']} against off on these {mode['jobs']} problems: accuracy {gain:+.1f} "
        f"points, {speed:.2f}x the problems/s (one run: a single sitting's figures)"
    )
    return lines


def job_row(r: schema.Result, gold: str) -> dict:
    """One job of the summary: its answer, what of its reasoning was checked (a step with
    nothing to check is not counted as verified), its contradicted claims and backtracks."""
    v = r.verification
    verdicts = Counter(s.verdict for s in r.steps)
    return {
        "id": r.id,
        "answer": r.answer or "",
        "correct": r.status == "ok" and answers_match(r.answer, gold),
        "steps": len(r.steps),
        "entailed": verdicts["entailed"],
        "nothing_to_check": verdicts["no_claim"],
        "contradicted_claims": v.contradicted if v is not None else 0,  # rolled back ones too
        "ungrounded_claims": v.ungrounded if v is not None else 0,
        "backtracks": r.usage.backtracks,
        "coverage": v.status if v is not None else "off",
        "stop_reason": r.budget.stop_reason or "",
    }


_ANSWER_CAP = 24  # characters of an answer in the job table (a long one is cut with `…`)


def job_table(rows: list[dict]) -> list[str]:
    """The per-job lines of the summary."""
    # A space between the columns: a full-width id beside a full-width answer otherwise reads
    # as one word. Ids are shown whole (a user copies them into `stepwise trace`), the column
    # as wide as the longest; answers too (`x = 4, y = 3`), up to a cap, then cut with `…`.
    w = max([len("job"), *(len(j["id"]) for j in rows)])
    aw = min(_ANSWER_CAP, max([len("answer"), *(len(j["answer"]) for j in rows)]))
    head = (f"{'job':<{w}} {'answer':>{aw}} {'ok':<3}{'steps':>6}{'entailed':>9}{'no claim':>9}"
            f"{'contr.':>7}{'ungr.':>6}{'backtr.':>8}  coverage / stop")  # fmt: skip
    lines = [head]
    for j in rows:
        answer = j["answer"] if len(j["answer"]) <= aw else j["answer"][: aw - 1] + "…"
        lines.append(
            f"{j['id']:<{w}} {answer:>{aw}} {'✓' if j['correct'] else '✗':<3}"
            f"{j['steps']:>6}{j['entailed']:>9}{j['nothing_to_check']:>9}"
            f"{j['contradicted_claims']:>7}{j['ungrounded_claims']:>6}{j['backtracks']:>8}"
            f"  {j['coverage']} / {j['stop_reason']}"
        )
    return lines


def print_report(r: dict) -> None:
    print()
    rows = [
        ("jobs (ok / sent)", f"{r['ok']} / {r['jobs']}"),
        ("answer accuracy", f"{r['accuracy']:.1%}"),
        (
            "e2e latency p50 / p95 / p99",
            f"{r['e2e_ms_p50']:.0f} / {r['e2e_ms_p95']:.0f} / {r['e2e_ms_p99']:.0f} ms",
        ),
        ("mean completion tokens", f"{r['mean_completion_tokens']:.1f}"),
        ("throughput", f"{r['jobs_per_s']:.2f} jobs/s, {r['tokens_per_s']:.1f} tokens/s"),
        ("wall time", f"{r['wall_s']:.1f} s"),
        (
            "step verdicts",
            ", ".join(
                f"{'nothing to check' if k == 'no_claim' else k} {v}"
                for k, v in sorted(r["verdicts"].items())
            ),
        ),  # fmt: skip
        ("claim verdicts", ", ".join(f"{k} {v}" for k, v in sorted(r["claims"].items())) or "-"),
        (
            "repairs / backtracks / wasted tokens / gave up",
            f"{r.get('repairs', 0)} / {r['backtracks']} / {r['wasted_tokens']} / {r['gave_up']}",
        ),
    ]
    width = max(len(k) for k, _ in rows)
    for k, v in rows:
        print(f"{k:<{width}}  {v}")
    if r.get("per_job"):
        print()
        for line in job_table(r["per_job"]):
            print(line)
    if lines := comparison_table(r.get("comparison") or []):
        print()
        print("what verification gains (the burst again with verification off):")
        for line in lines:
            print(line)


def main(
    n: int, seed: int, model: str, reasoning_format: str | None = None,
    verify: str = DEFAULT_VERIFY, compare: bool = True,
) -> int:  # fmt: skip

    current = settings.current()
    config = PipelineConfig.from_settings(current, model=model)
    kafka, prefix = config.kafka, config.topic_prefix
    fmt = format_for(resolve_model(model), reasoning_format)
    # The tiny reasoner answers its own problem lines; a chat model gets the broader curriculum
    # (products, negatives, stories, equations) as chat messages.
    instruction = answer_instruction(fmt)
    tasks = "indist" if instruction is None else "broad"
    if kafka:  # a running pipeline (`stepwise up` elsewhere, or compose)
        report = asyncio.run(run_demo(kafka, prefix, n, seed, tasks, instruction, verify, compare))
    else:
        print("starting a local pipeline (embedded broker + Redis + workers) ...", file=sys.stderr)
        log_dir = tempfile.mkdtemp(prefix="stepwise-demo-")
        fmt = {"reasoning_format": reasoning_format} if reasoning_format else {}
        with Stack(
            PipelineConfig.from_settings(current, model=model, **fmt), log_dir=log_dir
        ) as stack:
            for line in stack.describe():
                print("  " + line, file=sys.stderr)
            bootstrap = stack.services.bootstrap_servers
            report = asyncio.run(
                run_demo(bootstrap, prefix, n, seed, tasks, instruction, verify, compare)
            )
    print_report(report)
    return 0 if report["ok"] == report["jobs"] else 1
