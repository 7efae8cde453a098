"""The pure cores of ingest and decode, with the bundled tokenizer and no Kafka or Redis."""

import asyncio
import threading
from types import SimpleNamespace

import pytest

from pipeline import schema
from pipeline.decode.results import JobRun, finish, outward, token_events
from pipeline.engine.sampling_params import SamplingParams
from pipeline.engine.sequence import Sequence
from pipeline.engine.tokenizer import Tokenizer
from pipeline.errors import InvalidRequestError, PromptTooLongError
from pipeline.formats import get_format
from pipeline.ingest.admission import IngestCore, job_seed
from pipeline.models.resolve import resolve_model
from pipeline.reasoning.driver import ReasoningDriver
from pipeline.reasoning.loop import ReasoningJob
from pipeline.reasoning.machine import ReasoningConfig
from pipeline.stage import processes
from pipeline.stage import worker as stage_worker
from pipeline.stage.processes import exit_within

BUDGET = schema.Budget(max_steps=8, max_thinking_tokens=64)


@pytest.fixture(scope="module")
def tok() -> Tokenizer:
    return Tokenizer(resolve_model("tiny-reasoner"))


@pytest.fixture
def core(tok) -> IngestCore:
    return IngestCore(tok, max_model_len=64, model_name="tiny-reasoner", default_budget=BUDGET)


def test_admit_tokenizes_with_the_chat_template_and_seeds_from_the_id(core, tok):
    job = schema.Job(id="j-1", prompt="What is 2 + 3?")
    task = core.admit(job, now_ms=1000)
    assert tok.decode(task.token_ids) == "Q: What is 2 + 3?\n"
    assert task.params.seed == job_seed("j-1") == job_seed("j-1")
    assert task.budget == BUDGET and task.admitted_ms == 1000 and task.model == "tiny-reasoner"
    seeded = schema.Job(id="j-2", prompt="x", params=schema.JobParams(seed=5))
    assert core.admit(seeded, 0).params.seed == 5


def test_admit_refuses_a_prompt_longer_than_the_context_naming_the_job(core):
    with pytest.raises(PromptTooLongError) as e:
        core.admit(schema.Job(id="long-1", prompt="9" * 200), now_ms=0)
    assert e.value.job_id == "long-1" and e.value.code == "prompt_too_long"


def test_a_live_budget_wins_over_the_default(tok):
    live = schema.Budget(max_steps=2, max_thinking_tokens=16, version=7)
    core = IngestCore(tok, 64, "m", BUDGET, budget_source=lambda cls: live)
    assert core.admit(schema.Job(id="b", prompt="1 + 1"), 0).budget == live


# Qwen3's switch and its interleaved thinking, in a small template of the same shape.
SWITCH_TEMPLATE = (
    "{% for m in messages %}<|{{ m.role }}|>{% if m.reasoning_content %}<think>"
    "{{ m.reasoning_content }}</think>{% endif %}{{ m.content }}\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% if enable_thinking is defined and "
    "not enable_thinking %}<think></think>{% endif %}{% endif %}"
)


@pytest.fixture(scope="module")
def switch_tok(tmp_path_factory) -> Tokenizer:
    from tests.model_factory import add_char_tokenizer

    path = tmp_path_factory.mktemp("switch")
    return Tokenizer(add_char_tokenizer(path, chat_template=SWITCH_TEMPLATE))


def test_admit_renders_the_template_with_the_jobs_kwargs_and_earlier_thinking(switch_tok):
    core = IngestCore(switch_tok, 512, "m", BUDGET)
    msgs = [schema.Message(role="user", content="2+3?")]
    on = switch_tok.decode(core.admit(schema.Job(id="k1", messages=msgs), 0).token_ids)
    off_job = schema.Job(id="k2", messages=msgs, chat_template_kwargs={"enable_thinking": False})
    off = switch_tok.decode(core.admit(off_job, 0).token_ids)
    assert on.endswith("<|assistant|>") and off.endswith("<|assistant|><think></think>")
    turns = [*msgs, schema.Message(role="assistant", content="5", reasoning_content="2+3=5")]
    turns.append(schema.Message(role="user", content="*4?"))
    kept = switch_tok.decode(core.admit(schema.Job(id="k3", messages=turns), 0).token_ids)
    assert "<|assistant|><think>2+3=5</think>5" in kept  # this template keeps it


# Qwen3's way of dropping it: thinking only on assistant turns after the last user message.
DROP_TEMPLATE = (
    "{% set ns = namespace(last_user=-1) %}{% for m in messages %}{% if m.role == 'user' %}"
    "{% set ns.last_user = loop.index0 %}{% endif %}{% endfor %}"
    "{% for m in messages %}<|{{ m.role }}|>{% if m.role == 'assistant' and "
    "loop.index0 > ns.last_user and m.reasoning_content %}<think>"
    "{{ m.reasoning_content }}</think>{% endif %}{{ m.content }}\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)


def test_admit_leaves_earlier_thinking_out_when_the_template_drops_it(switch_tok, tmp_path):
    from tests.model_factory import add_char_tokenizer

    drop_tok = Tokenizer(add_char_tokenizer(tmp_path, chat_template=DROP_TEMPLATE))
    turns = [
        schema.Message(role="user", content="2+3?"),
        schema.Message(role="assistant", content="5", reasoning_content="2+3=5"),
        schema.Message(role="user", content="*4?"),
        schema.Message(role="assistant", content="20", reasoning_content="5*4=20"),
    ]
    job = schema.Job(id="k5", messages=turns)
    dropped = drop_tok.decode(IngestCore(drop_tok, 512, "m", BUDGET).admit(job, 0).token_ids)
    assert "2+3=5" not in dropped and dropped.count("<think>") == 1  # no earlier thinking
    assert "<|assistant|>5\n" in dropped  # the earlier answer stays
    assert "<|assistant|><think>5*4=20</think>20\n" in dropped  # the last turn keeps its own
    kept = switch_tok.decode(IngestCore(switch_tok, 512, "m", BUDGET).admit(job, 0).token_ids)
    assert "<|assistant|><think>2+3=5</think>5\n" in kept  # same turns, a keeping template


def test_admit_refuses_template_kwargs_for_a_model_without_a_template(tmp_path):
    from tests.model_factory import add_char_tokenizer

    tok = Tokenizer(add_char_tokenizer(tmp_path))
    core = IngestCore(tok, 512, "m", BUDGET)
    job = schema.Job(id="k4", prompt="2+3?", chat_template_kwargs={"enable_thinking": False})
    with pytest.raises(InvalidRequestError, match="chat_template_kwargs") as e:
        core.admit(job, 0)
    assert e.value.job_id == "k4"


def test_the_tiny_format_takes_the_last_answer_line():
    tiny = get_format("tiny")
    assert tiny.find_answer("3 + 4 = 7\nAnswer: 7\n") == "7"
    assert tiny.find_answer("Answer: 1\nCheck: 1 = 1\nanswer : x = 2, y = 3") == "x = 2, y = 3"
    assert tiny.find_answer("no answer here") is None


class TextOnlyEngine:
    """What a driver needs of an engine when nothing is rolled back: the tokenizer."""

    def __init__(self, tok):
        self.tokenizer = tok
        self.max_model_len = 512


def make_run(tok, text: str, stream: str = "steps", verify: str = "off") -> JobRun:
    prompt = tok.encode("Q: What is 3 + 4?\n")
    h = schema.Handoff(
        id="d-1",
        model="tiny-reasoner",
        token_ids=prompt,
        params=schema.JobParams(stream=stream),
        budget=BUDGET,
        admitted_ms=100,
        first_token=0,
        first_logprob=0.0,
        prefill_worker="p",
        prefill_ms=3,
        seed=1,
    )
    seq = Sequence("d-1", prompt, SamplingParams(max_tokens=64), seed=1, arrival=0)
    for ch in tok.encode(text, add_special_tokens=False):
        seq.token_ids.append(ch)
        if tok.decode([ch]) == "\n":
            seq.step_ends.append(seq.num_tokens)
    driver = ReasoningDriver(TextOnlyEngine(tok), seq, ReasoningConfig(verify=verify))
    problem = tok.decode(prompt)
    job = ReasoningJob("d-1", driver, h.params, BUDGET)
    return JobRun(h, job, problem, "stepwise.verdicts:w", started_ms=150)


def advance(run, tok, now_ms):
    return outward(run, run.driver.advance(now_ms / 1000), tok, now_ms)


def test_steps_stream_as_they_complete_numbered_after_accepted(tok):
    run = make_run(tok, "3 + 4 = 7\nAnswer: 7\n")
    events, checks = advance(run, tok, now_ms=200)
    assert [(e.seq, e.kind, e.step, e.text) for e in events] == [
        (1, "step", 0, "3 + 4 = 7"),
        (2, "step", 1, "Answer: 7"),
    ]
    assert checks == [] and advance(run, tok, now_ms=201) == ([], [])  # nothing new


def test_token_streaming_sends_text_deltas(tok):
    run = make_run(tok, "3 + 4", stream="tokens")
    (ev,) = token_events(run, tok, now_ms=200)
    assert ev.kind == "token" and ev.text == "3 + 4"
    run.seq.token_ids += tok.encode(" = 7", add_special_tokens=False)
    (ev,) = token_events(run, tok, now_ms=201)
    assert ev.text == " = 7"


def test_token_streaming_goes_on_after_a_rollback_under_the_streamed_text(tok):
    # A forced answer cuts the unfinished step and appends the cue: the answer must stream
    # (the stream once stayed silent until the text outgrew what had been sent).
    run = make_run(tok, "3 + 4 = 7\n5 * 2 = 1", stream="tokens")
    token_events(run, tok, now_ms=200)
    del run.seq.token_ids[run.seq.step_ends[0] :]
    run.seq.token_ids += tok.encode("Answer: 7\n", add_special_tokens=False)
    events = token_events(run, tok, now_ms=201)
    assert run.token_text == "3 + 4 = 7\nAnswer: 7\n"
    # The tiny format's content is its last answer line: it is held until the stream ends
    # (a later answer line would make this one reasoning), then sent as content.
    assert [e.channel for e in events] == []
    assert run.splitter.flush().content == "Answer: 7"


def test_token_events_split_thinking_from_the_answer_at_any_cut(tok):
    r1 = get_format("deepseek_r1")
    text = "Let me see. 3 + 4 = 7.\n\nYes.\n</think>\n\nThe answer is \\boxed{7}."
    for cut in range(1, len(text)):
        run = make_run(tok, text[:cut], stream="tokens")
        run.driver.format = r1
        events = token_events(run, tok, now_ms=200)
        run.seq.token_ids = run.seq.token_ids[: run.seq.num_prompt_tokens]
        run.seq.token_ids += tok.encode(text, add_special_tokens=False)
        events += token_events(run, tok, now_ms=201)
        tail = run.splitter.flush()
        reasoning = "".join(e.text for e in events if e.channel == "reasoning") + tail.reasoning
        content = "".join(e.text for e in events if e.channel == "content") + tail.content
        whole = r1.split(text)
        assert (reasoning, content) == (whole.reasoning, whole.content), cut


def test_verified_steps_become_verify_requests_and_verdicts_become_events(tok):
    run = make_run(tok, "3 + 4 = 7\n4 * 2 = 8\n", verify="async")  # true: no fast verdict
    events, checks = advance(run, tok, now_ms=200)
    assert [e.kind for e in events] == ["step", "step"]
    assert [(c.step, c.text, c.accepted) for c in checks] == [
        (0, "3 + 4 = 7", []),
        (1, "4 * 2 = 8", ["3 + 4 = 7"]),
    ]
    assert checks[0].problem == "Q: What is 3 + 4?\n" and checks[0].reply_stream.endswith(":w")
    assert checks[0].id == "d-1" and checks[0].key != checks[1].key
    outs = run.driver.verdict(checks[0].key, "entailed", "", 0.3)
    (ev,), _ = outward(run, outs, tok, 300)
    assert (ev.kind, ev.step, ev.verdict) == ("verdict", 0, "entailed")


def test_finish_builds_the_one_result(tok):
    run = make_run(tok, "3 + 4 = 7\nAnswer: 7\n")
    run.seq.finish_reason = "stop"
    events, result = finish(run, tok, now_ms=400)
    assert events[-1].kind == "final" and events[-1].text == "7"
    assert [e.seq for e in events] == [1, 2, 3]
    assert result.status == "ok" and result.answer == "7" and result.id == "d-1"
    assert [s.text for s in result.steps] == ["3 + 4 = 7", "Answer: 7"]
    assert result.usage.completion_tokens == run.seq.num_output_tokens
    # The thinking's tokens: the steps before the answer line, as the format split them.
    assert result.reasoning == "3 + 4 = 7"
    assert result.usage.reasoning_tokens == len(tok.encode("3 + 4 = 7", add_special_tokens=False))
    assert 0 < result.usage.reasoning_tokens < result.usage.completion_tokens
    assert result.usage.steps == 2 and result.budget.stop_reason == "answer"
    assert result.timings.e2e_ms == 300 and result.timings.stages["prefill"] == 3


def test_an_unterminated_last_line_is_a_step_and_length_is_max_tokens(tok):
    run = make_run(tok, "3 + 4 = 7\nAnswer: 7")
    run.seq.finish_reason = "length"
    events, result = finish(run, tok, now_ms=400)
    assert [s.text for s in result.steps] == ["3 + 4 = 7", "Answer: 7"]
    assert result.budget.stop_reason == "max_tokens"


def test_a_shutdown_step_that_hangs_is_bounded(monkeypatch, caplog):
    """A consumer that never leaves its group (a broker that stopped answering) must not keep
    a worker from exiting: each release step is bounded, logged, and the rest go on."""
    monkeypatch.setattr(processes, "RELEASE_TIMEOUT_S", 0.05)
    me = SimpleNamespace(worker_id="w-1")
    released = []

    async def hangs():
        await asyncio.Event().wait()

    async def fails():
        raise ConnectionError("gone")

    async def shutdown():
        await stage_worker.StageWorker._release(me, "the consumer", hangs())
        await stage_worker.StageWorker._release(me, "the producer", fails())
        released.append("redis")

    asyncio.run(asyncio.wait_for(shutdown(), 5))
    assert released == ["redis"]
    assert "releasing the consumer took over" in caplog.text
    assert "releasing the producer failed" in caplog.text


def test_a_stopped_worker_whose_interpreter_exit_hangs_is_ended(capfd):
    """After the worker stopped, a hung interpreter exit (a non-daemon thread, an executor)
    ends within the grace, with where the threads waited on stderr and the worker's code."""
    ended = []
    done = threading.Event()
    exit_within(0.05, 3, exit_now=lambda code: (ended.append(code), done.set()))
    assert done.wait(5)
    assert ended == [3]
    assert "exit hung" in capfd.readouterr().err
