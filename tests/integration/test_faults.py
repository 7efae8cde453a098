"""Infrastructure faults on a real local stack under load (issue 24): every job ends with exactly
one Result, none past its deadline, none twice.

One stack for the module (tools/faults.py's FaultStack): its own embedded broker and
Redis on free ports (never the session's, which other tests share: these faults would hit
them), real worker processes (ingest, prefill, decode, a Celery verify worker), 16 jobs per
case, verified asynchronously so Redis and Celery are on every job's path. Each case injects
its fault once decode is stepping, while later jobs are still being sent (a verify pool killed
with no replacement: before the first job, tools/faults.py's BEFORE_JOBS), then counts every
Result record on the topic per job id. A case's stages are healed (a stage left without a
process gets one) before the next. What each fault does: docs/pipeline.md, "Faults".
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator

import pytest

from tools.faults import BROKER_PAUSE_S, FaultRun, FaultStack, make_jobs, run_case

pytestmark = pytest.mark.slow

NUM_JOBS = 16
DEADLINE_S = 150.0  # per case: a job with no Result by then is lost, and the test fails


@pytest.fixture(scope="module")
def stack(tmp_path_factory) -> Iterator[FaultStack]:
    fault_stack = FaultStack(tmp_path_factory.mktemp("faults"))
    try:
        asyncio.run(fault_stack.start())
        yield fault_stack
    finally:
        asyncio.run(fault_stack.stop())


async def run(stack: FaultStack, fault: str) -> FaultRun:
    stack.heal()
    jobs = make_jobs(NUM_JOBS, f"{fault}-{uuid.uuid4().hex[:6]}")
    case = await run_case(stack, fault, jobs, deadline_s=DEADLINE_S)
    assert case.injected_at_s is not None, "the fault was never injected: jobs ended too soon"
    # Exactly one Result each, all of them ok: a fault the stack survives turns no good job
    # into an error, and loses or repeats none.
    problems = (case.lost, case.duplicated, case.not_ok)
    assert not any(problems), f"lost={problems[0]} dupes={problems[1]} not ok={problems[2]}\n" + (
        stack.logs()
    )
    return case


@pytest.mark.timeout(240)
async def test_a_redis_restart_loses_and_repeats_nothing(stack):
    await run(stack, "redis_restart")
    # The Celery worker reconnected (or restarted itself) instead of leaving verify down.
    assert stack.workers.live("verify"), stack.logs()


@pytest.mark.timeout(240)
async def test_a_broker_unreachable_for_10_s_delays_jobs_and_loses_nothing(stack):
    case = await run(stack, "broker_pause")
    assert case.worst_latency_s >= BROKER_PAUSE_S - 1, case.latency_s  # it did hold them up


@pytest.mark.timeout(240)
async def test_a_dead_verify_pool_with_no_replacement_leaves_jobs_to_verdict_timeouts(stack):
    case = await run(stack, "verify_killed")
    assert not stack.workers.live("verify")
    assert case.verdict_timeouts > 0, "no step waited for a verdict: the fault changed nothing"


@pytest.mark.timeout(240)
async def test_a_verify_pool_killed_and_replaced_loses_nothing(stack):
    await run(stack, "verify_replaced")
    assert len(stack.workers.live("verify")) == 1


@pytest.mark.timeout(240)
async def test_a_decode_host_lost_mid_handoff_is_redone_by_its_replacement(stack):
    before = stack.workers.live("decode")
    await run(stack, "decode_lost")
    after = stack.workers.live("decode")
    assert len(after) == 1 and after[0] not in before, stack.logs()
