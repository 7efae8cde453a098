"""The wire contract: round trips, every bad-input code, id recovery, and fuzzing."""

from __future__ import annotations

import contextlib

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pipeline.errors import PromptTooLongError, StepwiseError
from pipeline.schema import (
    SCHEMA_ERROR_CODES,
    SLO,
    Budget,
    BudgetReport,
    DeadLetter,
    ErrorInfo,
    Event,
    Handoff,
    Job,
    JobParams,
    KVDescriptor,
    Limits,
    Message,
    PrefillTask,
    Result,
    SchemaError,
    StepRecord,
    Timings,
    Tool,
    Usage,
    content_type_of,
    dead_letter,
    decode,
    decode_job,
    encode,
    encode_json,
    peek_job_id,
    rejected_result,
)

JSON = "application/json"


def full_job() -> Job:
    return Job(
        id="job-1:a.b_c",
        tenant="acme",
        app="tutor",
        user="u42",
        messages=[
            Message(role="system", content="Be brief."),
            Message(role="user", content="2+2?"),
        ],
        premises=["x = 3", "y > x"],
        model="tiny-reasoner",
        params=JobParams(
            temperature=0.6,
            top_p=0.95,
            top_k=20,
            min_p=0.05,
            seed=7,
            max_tokens=512,
            max_steps=12,
            verify="strict",
            early_exit=True,
            stream="tokens",
        ),
        slo=SLO(class_="batch", e2e_ms=60_000),
        reply_topic="acme.results",
        created_ms=1_700_000_000_000,
    )


def prefill_task() -> PrefillTask:
    return PrefillTask(
        id="job-1",
        tenant="acme",
        model="tiny-reasoner",
        token_ids=[1, 5, 9, 2],
        premises=["x = 3"],
        params=JobParams(seed=11),
        slo=SLO(e2e_ms=5000),
        budget=Budget(max_steps=8, max_thinking_tokens=1024, version=3),
        cache_key="answer:abc",
        created_ms=1,
        admitted_ms=2,
    )


def handoff() -> Handoff:
    kv = KVDescriptor(
        transport="shm",
        handle="/stepwise-kv-17",
        num_tokens=4,
        num_layers=2,
        num_kv_heads=2,
        head_dim=8,
        dtype="float32",
        nbytes=2 * 2 * 4 * 2 * 8 * 4,
        owner="prefill-0",
        expires_ms=30_000,
    )
    fields = msgspec.structs.asdict(prefill_task())
    return Handoff(
        **fields,
        first_token=42,
        first_logprob=-0.25,
        kv=kv,
        prefill_worker="prefill-0",
        prefill_ms=3.5,
        seed=11,
    )


def result() -> Result:
    return Result(
        id="job-1",
        status="ok",
        tenant="acme",
        slo_class="batch",
        model="tiny-reasoner",
        answer="4",
        text="2+2 = 4\nAnswer: 4",
        steps=[StepRecord(text="2+2 = 4", verdict="entailed")],
        usage=Usage(prompt_tokens=4, completion_tokens=9, probe_tokens=2, steps=1, backtracks=0),
        timings=Timings(queue_ms=1.0, ttft_ms=12.5, e2e_ms=80.0, stages={"prefill": 10.0}),
        budget=BudgetReport(max_thinking_tokens=1024, used=9, stop_reason="answer"),
        ts_ms=99,
    )


INTERNAL = [
    prefill_task(),
    handoff(),
    Event(id="job-1", seq=0, kind="accepted", ts_ms=1),
    Event(
        id="job-1", seq=3, kind="verdict", step=1, verdict="contradicted", detail="2+2=5", ts_ms=2
    ),
    result(),
    Result(id="job-1", status="error", error=ErrorInfo(code="internal", message="boom"), ts_ms=1),
    DeadLetter(
        topic="stepwise.jobs",
        partition=0,
        offset=17,
        key=b"job-1",
        payload=b"\xc1",
        payload_bytes=1,
        code="undecodable",
        message="bad",
        ts_ms=5,
    ),
]


def job_dict(**overrides) -> dict:
    job = {"id": "j1", "prompt": "What is 2+2?"}
    job.update(overrides)
    return job


def as_msgpack(obj) -> bytes:
    return msgspec.msgpack.encode(obj)


def as_json(obj) -> bytes:
    return msgspec.json.encode(obj)


# -- round trips ------------------------------------------------------------------------------


def test_job_round_trips_msgpack_and_json():
    job = full_job()
    assert decode_job(encode(job)) == job
    assert decode_job(encode_json(job), JSON) == job
    assert b'"class":"batch"' in encode_json(job)  # the wire name, not the Python one


@pytest.mark.parametrize("msg", INTERNAL, ids=lambda m: type(m).__name__)
def test_internal_messages_round_trip(msg):
    assert decode(encode(msg), type(msg)) == msg


def test_decode_routes_jobs_through_job_validation():
    assert decode(encode(full_job()), Job) == full_job()
    with pytest.raises(SchemaError) as err:
        decode(as_msgpack(job_dict(prompt="")), Job)
    assert err.value.code == "invalid_field"


def test_minimal_job_takes_defaults():
    job = decode_job(as_json(job_dict()), JSON)
    assert (job.v, job.tenant, job.app, job.user) == (1, "default", "default", "default")
    assert job.params == JobParams() and job.slo == SLO() and job.premises == []


def test_ints_accepted_for_floats_and_unknown_fields_ignored():
    job = decode_job(as_msgpack(job_dict(params={"temperature": 1}, future_field={"a": [1]})))
    assert job.params.temperature == 1.0


@pytest.mark.parametrize(
    "content_type",
    [JSON, "application/json; charset=utf-8", b"Application/JSON", None],
)
def test_json_content_types(content_type):
    assert decode_job(b'  {"id": "j1", "prompt": "hi"}', content_type).id == "j1"


@pytest.mark.parametrize("content_type", ["application/msgpack", "application/x-msgpack", None, ""])
def test_msgpack_content_types(content_type):
    assert decode_job(as_msgpack(job_dict()), content_type).id == "j1"


def test_content_type_of_headers():
    assert content_type_of([("trace", b"x"), ("Content-Type", b"application/json")]) == JSON
    assert content_type_of([("content-type", "application/json")]) == JSON
    assert content_type_of(None) is None and content_type_of([("content-type", None)]) is None


# -- bad input -> a code, a field, and the id when readable ----------------------------------

BAD_JOBS = [
    # (payload, content_type, code, field, job_id)
    (b"\xc1", None, "undecodable", None, None),
    (as_msgpack(job_dict())[:-3], None, "undecodable", None, None),
    (b'{"id": "j1", "prompt": ', JSON, "undecodable", None, None),
    (as_msgpack(job_dict()) + b"\x00", None, "undecodable", None, None),
    (as_msgpack(["j1", "hi"]), None, "undecodable", None, None),
    (b'"just a string"', JSON, "undecodable", None, None),
    (as_msgpack(job_dict()), "text/plain", "unsupported_content_type", None, None),
    (
        as_msgpack(job_dict(params={"temperature": "hot"})),
        None,
        "invalid_field",
        "params.temperature",
        "j1",
    ),
    (
        as_msgpack(job_dict(params={"temperature": 2.5})),
        None,
        "invalid_field",
        "params.temperature",
        "j1",
    ),
    (
        as_msgpack(job_dict(params={"temperature": float("nan")})),
        None,
        "invalid_field",
        "params.temperature",
        "j1",
    ),
    (as_msgpack(job_dict(params={"top_p": 0})), None, "invalid_field", "params.top_p", "j1"),
    (as_msgpack(job_dict(params={"top_k": 0})), None, "invalid_field", "params.top_k", "j1"),
    (as_msgpack(job_dict(params={"top_k": -2})), None, "invalid_field", "params.top_k", "j1"),
    (
        as_msgpack(job_dict(params={"max_tokens": 0})),
        None,
        "invalid_field",
        "params.max_tokens",
        "j1",
    ),
    (
        as_msgpack(job_dict(params={"max_tokens": 40000})),
        None,
        "invalid_field",
        "params.max_tokens",
        "j1",
    ),
    (as_msgpack(job_dict(params={"seed": -1})), None, "invalid_field", "params.seed", "j1"),
    (
        as_msgpack(job_dict(params={"verify": "maybe"})),
        None,
        "invalid_field",
        "params.verify",
        "j1",
    ),
    (
        as_msgpack(job_dict(params={"early_exit": "yes"})),
        None,
        "invalid_field",
        "params.early_exit",
        "j1",
    ),
    (as_json(job_dict(slo={"class": "urgent"})), JSON, "invalid_field", "slo.class", "j1"),
    (as_json(job_dict(slo={"e2e_ms": 0})), JSON, "invalid_field", "slo.e2e_ms", "j1"),
    (as_json(job_dict(premises="x = 1")), JSON, "invalid_field", "premises", "j1"),
    (as_json(job_dict(reply_topic="no spaces")), JSON, "invalid_field", "reply_topic", "j1"),
    (as_json(job_dict(tenant="acme corp")), JSON, "invalid_field", "tenant", "j1"),
    (as_json(job_dict(user="u" * 65)), JSON, "invalid_field", "user", "j1"),
    (as_json(job_dict(prompt="")), JSON, "invalid_field", "prompt", "j1"),
    (as_json(job_dict(messages=[])), JSON, "invalid_field", "prompt", "j1"),
    (as_json({"id": "j1", "messages": []}), JSON, "invalid_field", "messages", "j1"),
    (
        as_json({"id": "j1", "messages": [{"role": "robot", "content": "x"}]}),
        JSON,
        "invalid_field",
        "messages[0].role",
        "j1",
    ),
    (  # a tool's result says which call it answers
        as_json({"id": "j1", "messages": [{"role": "tool", "content": "x"}]}),
        JSON,
        "invalid_field",
        "messages[0].tool_call_id",
        "j1",
    ),
    (
        as_json(
            {
                "id": "j1",
                "messages": [
                    {
                        "role": "user",
                        "content": "x",
                        "tool_calls": [{"id": "c", "function": {"name": "f", "arguments": "{}"}}],
                    }
                ],
            }
        ),
        JSON,
        "invalid_field",
        "messages[0].tool_calls",
        "j1",
    ),  # fmt: skip
    (
        as_json({"id": "j1", "prompt": "x", "tool_choice": "not a name"}),
        JSON,
        "invalid_field",
        "tool_choice",
        "j1",
    ),
    (
        as_json({"id": "j1", "messages": [{"role": "user"}]}),
        JSON,
        "missing_field",
        "messages[0].content",
        "j1",
    ),
    (as_json({"prompt": "hi"}), JSON, "missing_field", "id", None),
    (as_json({"id": "j1"}), JSON, "missing_field", "prompt", "j1"),
    (as_json(job_dict(v=2)), JSON, "unsupported_version", "v", "j1"),
    (as_json(job_dict(v="1")), JSON, "unsupported_version", "v", "j1"),
    (as_json(job_dict(v=0)), JSON, "unsupported_version", "v", "j1"),
    # A v2 job may not even type-check as v1: the version is what gets reported.
    (as_json(job_dict(v=2, prompt={"parts": ["a"]})), JSON, "unsupported_version", "v", "j1"),
    (
        as_json(job_dict(chat_template_kwargs={"tokenize": True})),
        JSON,
        "invalid_field",
        "chat_template_kwargs.tokenize",
        "j1",
    ),
    (
        as_json(job_dict(chat_template_kwargs={"enable-thinking": True})),
        JSON,
        "invalid_field",
        "chat_template_kwargs.enable-thinking",
        "j1",
    ),
    (
        as_json(job_dict(chat_template_kwargs={f"k{i}": i for i in range(40)})),
        JSON,
        "too_large",
        "chat_template_kwargs",
        "j1",
    ),
    (
        as_json(job_dict(chat_template_kwargs={"thinking": [True]})),
        JSON,
        "invalid_field",
        "chat_template_kwargs[...]",  # msgspec's path for a map's value
        "j1",
    ),
    (
        as_json(
            {"id": "j1", "messages": [{"role": "user", "content": "x", "reasoning_content": "y"}]}
        ),
        JSON,
        "invalid_field",
        "messages[0].reasoning_content",
        "j1",
    ),
    (as_msgpack(job_dict(id=b"j1")), None, "bad_id", "id", None),
    (as_json(job_dict(id=17)), JSON, "bad_id", "id", None),
]


@pytest.mark.parametrize("payload,content_type,code,field,job_id", BAD_JOBS)
def test_bad_jobs_map_to_codes(payload, content_type, code, field, job_id):
    with pytest.raises(SchemaError) as err:
        decode_job(payload, content_type)
    assert err.value.code == code, str(err.value)
    assert err.value.field == field
    assert err.value.job_id == job_id
    assert code in SCHEMA_ERROR_CODES and isinstance(err.value, StepwiseError)
    if field is not None:
        assert field.split("[")[0].split(".")[-1] in str(err.value)  # the message names it


@pytest.mark.parametrize("bad_id", ["", "a b", "a/b", "é", "job#1", "x" * 129, "new\nline"])
def test_bad_id_characters_rejected(bad_id):
    with pytest.raises(SchemaError) as err:
        decode_job(as_json(job_dict(id=bad_id)), JSON)
    assert (err.value.code, err.value.field, err.value.job_id) == ("bad_id", "id", None)
    assert peek_job_id(as_json(job_dict(id=bad_id)), JSON) is None


@pytest.mark.parametrize("good_id", ["a", "A.b_c:d-1", "x" * 128, "2024-01-01T00:00:00.123"])
def test_good_ids_accepted(good_id):
    assert decode_job(as_msgpack(job_dict(id=good_id))).id == good_id


LIMITS = Limits(max_prompt_chars=10, max_messages=2, max_premises=2, max_premise_chars=5)


@pytest.mark.parametrize(
    "job,field",
    [
        (job_dict(prompt="x" * 11), "prompt"),
        ({"id": "j1", "messages": [{"role": "user", "content": "x" * 6}] * 2}, "messages"),
        ({"id": "j1", "messages": [{"role": "user", "content": "x"}] * 3}, "messages"),
        (job_dict(prompt="hi", premises=["a", "b", "c"]), "premises"),
        (job_dict(prompt="hi", premises=["a", "bbbbbb"]), "premises[1]"),
    ],
)
def test_limits_give_too_large(job, field):
    with pytest.raises(SchemaError) as err:
        decode_job(as_msgpack(job), limits=LIMITS)
    assert (err.value.code, err.value.field, err.value.job_id) == ("too_large", field, "j1")


def test_limits_at_the_boundary_pass():
    job = job_dict(prompt="x" * 10, premises=["a", "bbbbb"])
    assert decode_job(as_msgpack(job), limits=LIMITS).prompt == "x" * 10


def test_oversize_rejected_before_decoding():
    limits = Limits(max_message_bytes=100)
    # Garbage would be `undecodable` if it were decoded; over the limit it never is.
    with pytest.raises(SchemaError) as err:
        decode_job(b"\xc1" * 101, limits=limits)
    assert (err.value.code, err.value.job_id) == ("too_large", None)
    # A well-formed oversize job still yields its id, so the caller can reject it by id.
    with pytest.raises(SchemaError) as err:
        decode_job(as_msgpack(job_dict(prompt="x" * 200)), limits=limits)
    assert (err.value.code, err.value.job_id) == ("too_large", "j1")
    big = as_msgpack(job_dict(prompt="x" * 200))
    assert peek_job_id(big, limits=Limits(max_peek_bytes=100)) is None


def test_limits_validated_on_construction():
    with pytest.raises(ValueError, match="max_prompt_chars"):
        Limits(max_prompt_chars=0)


# -- internal messages -------------------------------------------------------------------------


def test_internal_decode_errors():
    event = msgspec.structs.asdict(Event(id="job-1", seq=0, kind="token", ts_ms=1))
    with pytest.raises(SchemaError) as err:
        decode(as_msgpack({**event, "kind": "gossip"}), Event)
    assert (err.value.code, err.value.field, err.value.job_id) == ("invalid_field", "kind", "job-1")
    with pytest.raises(SchemaError) as err:
        decode(as_msgpack({**event, "v": 9}), Event)
    assert err.value.code == "unsupported_version"
    with pytest.raises(SchemaError) as err:
        decode(encode(handoff()), Handoff, Limits(max_internal_bytes=10))
    assert (err.value.code, err.value.job_id) == ("too_large", "job-1")
    with pytest.raises(SchemaError) as err:
        decode(encode(prefill_task()), Handoff)  # a task is not yet a handoff
    assert err.value.code == "missing_field"
    with pytest.raises(SchemaError) as err:
        decode(encode_json(result()), Result)  # internal topics are msgpack only
    assert err.value.code == "undecodable"


# -- id recovery, rejected results, dead letters ---------------------------------------------


@pytest.mark.parametrize(
    "payload,content_type,expected",
    [
        (b"", None, None),
        (b"\xc1\xc1", None, None),
        (b"\x81\xa2id", None, None),  # cut off mid-message
        (b"\x91" * 100_000, None, None),  # nested past the recursion limit
        (b"[" * 100_000, JSON, None),
        (as_msgpack(job_dict(params={"temperature": "hot"})), None, "j1"),  # readable but invalid
        (as_msgpack({"id": "j1"}), b"application/msgpack", "j1"),
        (as_json(job_dict(v=3)), JSON, "j1"),
        (as_json(job_dict()), None, "j1"),  # JSON without the header
        (as_json(job_dict()), "text/plain", "j1"),  # wrong header: best effort still
        (as_msgpack({"id": ["j1"]}), None, None),
        (as_msgpack(["j1"]), None, None),
    ],
)
def test_peek_job_id(payload, content_type, expected):
    assert peek_job_id(payload, content_type) == expected


def test_rejected_result_round_trips():
    with pytest.raises(SchemaError) as err:
        decode_job(as_msgpack(job_dict(params={"top_p": 2})))
    res = rejected_result(err.value.job_id, err.value, tenant="acme", ts_ms=5)
    assert decode(encode(res), Result) == res
    assert (res.status, res.error.code, res.error.field) == (
        "rejected",
        "invalid_field",
        "params.top_p",
    )
    assert res.budget.stop_reason == "error"
    # Errors from later checks (ingest's tokenizer) reject the same way.
    res = rejected_result("j1", PromptTooLongError("4100 tokens > 4096"))
    assert (res.error.code, res.error.field) == ("prompt_too_long", None) and res.ts_ms > 0


def test_dead_letter_truncates_payload():
    payload = as_msgpack(job_dict(prompt="x" * 500))
    err = SchemaError("too big", code="too_large", job_id="j1")
    dl = dead_letter(
        topic="stepwise.jobs",
        partition=2,
        offset=9,
        key=b"j1",
        payload=payload,
        error=err,
        stage="ingest",
        limits=Limits(max_dead_letter_payload_bytes=64),
    )
    assert dl.payload == payload[:64] and dl.payload_bytes == len(payload)
    assert (dl.code, dl.job_id, dl.stage) == ("too_large", "j1", "ingest")
    assert decode(encode(dl), DeadLetter) == dl


# -- fuzzing: nothing but SchemaError, ever ----------------------------------------------------

FUZZ = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**64 - 1)
    | st.floats()
    | st.text(max_size=20)
    | st.binary(max_size=8)
)
jsonish = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=20,
)
job_keys = st.sampled_from(
    ["id", "v", "prompt", "messages", "premises", "params", "slo", "tenant", "model", "created_ms"]
)


def decode_only_schema_errors(data: bytes, content_type=None) -> None:
    try:
        decode_job(data, content_type)
    except SchemaError as err:
        assert err.code in SCHEMA_ERROR_CODES
    assert peek_job_id(data, content_type) is None or isinstance(peek_job_id(data), str)


@FUZZ
@given(st.binary(max_size=256), st.sampled_from([None, JSON, "application/msgpack", "x/y"]))
def test_fuzz_random_bytes(data, content_type):
    decode_only_schema_errors(data, content_type)
    for type_ in (PrefillTask, Handoff, Event, Result, DeadLetter):
        with contextlib.suppress(SchemaError):
            decode(data, type_)


@FUZZ
@given(jsonish)
def test_fuzz_random_objects(obj):
    decode_only_schema_errors(as_msgpack(obj))
    decode_only_schema_errors(as_json(obj), JSON)


@FUZZ
@given(st.dictionaries(job_keys, jsonish, max_size=6))
def test_fuzz_mutated_jobs(overrides):
    job = job_dict(**overrides)
    decode_only_schema_errors(as_msgpack(job))
    decode_only_schema_errors(as_json(job), JSON)


def test_a_tool_reaches_the_template_as_the_client_sent_it():
    """No field the client did not write (a `strict: false`, an empty description): found
    running the R1-style reasoner behind the gateway, whose prompt then differed from the one
    its tool training rendered, and whose calls went wrong."""
    sent = {"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}
    tool = msgspec.convert(sent, Tool)
    assert msgspec.to_builtins(tool) == sent
    full = {"type": "function", "function": {"name": "f", "description": "d", "strict": True}}
    assert msgspec.to_builtins(msgspec.convert(full, Tool)) == full
