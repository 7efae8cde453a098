"""`stepwise stream`'s rendering against a recorded event sequence (as the gateway sends it),
and GatewayClient's resume after a dropped connection, against a loopback WebSocket server."""

from __future__ import annotations

import argparse
import io
import json

import msgspec
import pytest
import websockets
from rich.console import Console

from pipeline import schema
from pipeline.cli.parser import add_stream_args
from pipeline.client import GatewayClient, GatewayStreamError, stream_url
from pipeline.client.stream_view import StreamView, coverage_line, job_from_args

J = "cli-0123456789ab"


def ev(seq: int, kind: str, **kw) -> str:
    return json.dumps({"v": 1, "id": J, "seq": seq, "kind": kind, "ts_ms": 1_700_000_000_000, **kw})


# A job whose second step is contradicted and resampled (the gateway's messages, in order).
RECORDED = [
    ev(0, "accepted"),
    ev(1, "step", step=0, text="5 + 9 = 14"),
    ev(2, "verdict", step=0, text="5 + 9 = 14", verdict="entailed", detail="5 + 9 = 14"),
    ev(3, "step", step=1, text="14 * 2 = 27"),
    ev(4, "verdict", step=1, text="14 * 2 = 27", verdict="contradicted", detail="14 * 2 is 28"),
    ev(5, "backtrack", step=1, text="14 * 2 = 27", verdict="contradicted",
       detail="step 1 contradicted (14 * 2 is 28); resampling from step 1"),
    ev(6, "step", step=1, text="14 * 2 = 28"),
    ev(7, "verdict", step=1, text="14 * 2 = 28", verdict="unknown", detail="timeout"),
    ev(8, "step", step=2, text="Answer: 28"),
    ev(9, "verdict", step=2, text="Answer: 28", verdict="no_claim"),
    ev(10, "final", text="28", detail="answer"),
    json.dumps({
        "kind": "result", "v": 1, "id": J, "status": "ok", "tenant": "default", "answer": "28",
        "steps": [{"text": "5 + 9 = 14", "verdict": "entailed"}],
        "usage": {"prompt_tokens": 12, "completion_tokens": 41, "steps": 3, "backtracks": 1},
        "timings": {"e2e_ms": 812},
        "budget": {"max_thinking_tokens": 512, "used": 37, "binding": "class",
                   "stop_reason": "answer"},
        "error": None, "ts_ms": 1_700_000_000_900,
    }),
]  # fmt: skip


def decode(raw: str) -> schema.Event | schema.Result:
    msg = json.loads(raw)
    if msg.pop("kind") == "result":
        return msgspec.convert(msg, schema.Result)
    return msgspec.convert({**msg, "kind": json.loads(raw)["kind"]}, schema.Event)


def render(view: StreamView, ansi: bool = False) -> str:
    console = Console(
        file=io.StringIO(), width=100, record=True, force_terminal=ansi, color_system="standard"
    )
    console.print(view)
    return console.export_text(styles=ansi)


def test_view_marks_verdicts_strikes_backtracked_steps_and_shows_the_budget():
    view = StreamView("What is (5 + 9) * 2?")
    for raw in RECORDED[:6]:
        view.apply(decode(raw))
    mid = render(view)
    assert "thinking … 1 step(s), 6 event(s)" in mid  # live: the chain is back to one step
    for raw in RECORDED[6:]:
        view.apply(decode(raw))
    lines = render(view).splitlines()
    assert lines[0] == f"What is (5 + 9) * 2?  [{J}]"
    assert lines[1:7] == [
        "  1. 5 + 9 = 14 ✓",
        "  2. 14 * 2 = 27 ✗",  # discarded: struck out (below)
        "   ↩ backtrack: again from step 2  (step 1 contradicted (14 * 2 is 28); resampling from "
        "step 1)",
        "  2. 14 * 2 = 28 ?",
        "  3. Answer: 28 –",  # nothing to check: not a green check
        "Answer: 28",
    ]
    assert lines[7].startswith("✓ entailed  ○ consistent  – nothing to check")
    assert lines[8] == (
        "ok  budget 37/512 thinking tokens · stop_reason answer · 3 steps, 1 backtrack, "
        "41 tokens · 812 ms"
    )
    assert [r.gone for r in view.rows if r.index >= 0] == [False, True, False, False]
    struck = render(view, ansi=True).splitlines()[2]
    assert "\x1b[2;9m14 * 2 = 27" in struck  # SGR 2;9: dim, struck through


def test_error_result_and_tokens_draft():
    view = StreamView()
    view.apply(decode(ev(0, "accepted")))
    view.apply(decode(ev(1, "token", text="5 + 9 ")))
    view.apply(decode(ev(2, "token", text="= 1")))
    assert "… 5 + 9 = 1" in render(view)
    err = schema.Result(
        id=J, status="error", ts_ms=0, error=schema.ErrorInfo(code="engine", message="boom")
    )
    view.apply(err)
    out = render(view)
    assert "error: [engine] boom" in out and out.splitlines()[-1].startswith("error  budget")


def test_job_from_args_and_stream_url():
    p = argparse.ArgumentParser()
    add_stream_args(p)
    args = p.parse_args(["2 + 2?", "--max-tokens", "64", "--tokens", "--verify", "strict"])
    assert job_from_args(args) == {
        "prompt": "2 + 2?", "params": {"max_tokens": 64, "verify": "strict", "stream": "tokens"}
    }  # fmt: skip
    assert stream_url("http://h:8000/") == "ws://h:8000/v1/stream"
    assert stream_url("https://h") == "wss://h/v1/stream"
    assert stream_url("h:1") == "ws://h:1/v1/stream"


async def test_client_resumes_a_dropped_stream_without_gap_or_duplicate():
    firsts: list[dict] = []

    async def handler(ws):
        firsts.append(json.loads(await ws.recv()))
        if len(firsts) == 1:
            for raw in RECORDED[:4]:
                await ws.send(raw)
            await ws.close(4008, "slow consumer")  # the gateway dropped us
        else:  # replay from the asked seq, one duplicate included
            for raw in RECORDED[firsts[-1]["from_seq"] - 1 :]:
                await ws.send(raw)
            await ws.close(1000)

    async with websockets.serve(handler, "127.0.0.1", 0) as server:
        port = server.sockets[0].getsockname()[1]
        client = GatewayClient(f"ws://127.0.0.1:{port}", api_key="k")
        items = [i async for i in client.stream({"id": J, "prompt": "p"})]
    assert firsts[0] == {"submit": {"id": J, "prompt": "p"}}
    assert firsts[1] == {"subscribe": J, "from_seq": 4}
    seqs = [i.seq for i in items if isinstance(i, schema.Event)]
    assert seqs == list(range(11)) and isinstance(items[-1], schema.Result)
    assert (client.num_resumes, client.num_duplicates) == (1, 1)


async def test_client_raises_the_gateways_refusal():
    async def handler(ws):
        await ws.recv()
        await ws.send(json.dumps({"error": {"code": "rate_limited", "message": "slow down"}}))
        await ws.close(4429, "rate_limited")

    async with websockets.serve(handler, "127.0.0.1", 0) as server:
        port = server.sockets[0].getsockname()[1]
        client = GatewayClient(f"ws://127.0.0.1:{port}")
        with pytest.raises(GatewayStreamError) as err:
            async for _ in client.stream({"prompt": "p"}):
                pass
    assert err.value.code == "rate_limited" and "slow down" in str(err.value)


def test_claims_are_marked_inside_the_prose_by_their_spans():
    from pipeline.client.stream_view import marked

    step = "\n\nSo $14 \\times 2 = 27$, and then 27 + 1 = 28.  "
    a = step.index("14 \\times 2 = 27")
    b = step.index("27 + 1 = 28")
    claims = [
        schema.ClaimInfo(text="14*2 = 27", span=(a, a + 16), verdict="contradicted"),
        schema.ClaimInfo(text="27+1 = 28", span=(b, b + 11), verdict="entailed"),
        schema.ClaimInfo(text="bad", span=(b + 2, b + 40), verdict="entailed"),  # out of range
    ]
    text = marked(step, claims)
    assert text.plain == "So $14 \\times 2 = 27[✗]$, and then 27 + 1 = 28[✓]."
    styles = {text.plain[s.start : s.end]: str(s.style) for s in text.spans}
    assert styles["14 \\times 2 = 27"] == "underline bold red"
    assert styles["27 + 1 = 28"] == "underline green"


def test_a_verdict_event_with_claims_reaches_the_row():
    view = StreamView()
    step = ev(1, "step", step=0, text="Then 2 + 2 = 5.")
    view.apply(msgspec.json.decode(step, type=schema.Event))
    claim = {"text": "2 + 2 = 5", "span": [5, 14], "verdict": "contradicted"}
    view.apply(
        msgspec.json.decode(
            ev(2, "verdict", step=0, verdict="contradicted", claims=[claim]), type=schema.Event
        )
    )
    out = io.StringIO()
    Console(file=out, width=100, color_system=None).print(view)
    assert "Then 2 + 2 = 5[✗]. ✗" in out.getvalue()


def test_a_step_with_nothing_to_check_is_not_a_green_check():
    view = StreamView("Tom has 12 apples and eats 3. How many are left?")
    view.apply(decode(ev(0, "step", step=0, text="Tom starts with twelve apples.")))
    view.apply(decode(ev(1, "verdict", step=0, verdict="no_claim")))
    view.apply(decode(ev(2, "step", step=1, text="He eats 3 * 4 = 12 apples.")))
    view.apply(decode(ev(3, "verdict", step=1, verdict="ungrounded",
                         detail="3 * 4 = 12: 4 is not in the problem or before")))  # fmt: skip
    view.apply(decode(ev(4, "step", step=2, text="Let x be what is left: 12 - 3 = x.")))
    view.apply(decode(ev(5, "verdict", step=2, verdict="consistent")))
    view.apply(schema.Result(
        id=J, status="ok", ts_ms=0, verification=schema.VerificationReport(
            status="partial", checks=3, claims=2, consistent=1, ungrounded=1, steps=3,
            steps_checkable=2, checkable_share=2 / 3),
    ))  # fmt: skip
    lines = render(view).splitlines()
    assert lines[1] == "  1. Tom starts with twelve apples. –"
    assert lines[2].startswith("  2. He eats 3 * 4 = 12 apples. ⚑  3 * 4 = 12: 4 is not")
    assert lines[3] == "  3. Let x be what is left: 12 - 3 = x. ○"
    assert "✓" not in "".join(lines[1:4])  # nothing here was entailed
    covered = " ".join(lines[4:6])  # (wrapped at the console's width)
    assert covered.startswith("partial: 2/3 steps checkable · 0 of 2 claims entailed, 1 cons")
    assert "0 contradicted, 1 ungrounded, 0 unreadable" in covered
    nothing = schema.VerificationReport(status="nothing_checkable", steps=1)
    assert "nothing checkable" in coverage_line(nothing)
    green = render(view, ansi=True).splitlines()[1]
    assert "\x1b[32m" not in green  # no green on a step with nothing to check


def test_a_repair_event_is_shown_before_its_step_and_is_no_backtrack():
    view = StreamView()
    for raw in [
        ev(0, "accepted"),
        ev(1, "repair", step=0, text="14 * 2 = 27", detail="27 -> 28: 14 * 2 = 27"),
        ev(2, "step", step=0, text="So 14 * 2 = 28."),
        ev(3, "verdict", step=0, text="So 14 * 2 = 28.", verdict="entailed"),
    ]:
        view.apply(decode(raw))
    lines = render(view).splitlines()
    repaired = "   ✎ repaired in step 1: 27 -> 28: 14 * 2 = 27"
    assert lines[1:3] == [repaired, "  1. So 14 * 2 = 28. ✓"]
    assert view.num_backtracks == 0


def test_a_tool_call_event_is_shown():
    view = StreamView()
    view.apply(decode(ev(0, "accepted")))
    call = {"id": "chatcmpl-tool-1", "type": "function",
            "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}  # fmt: skip
    view.apply(decode(ev(1, "tool_call", step=0, tool_call=call)))
    assert '⚙ tool call: get_weather({"city": "Paris"})' in render(view)


def test_a_cut_with_no_verdict_is_shown_as_dropped_not_as_a_resample():
    # A forced answer that follows the checked chain cut the unfinished step 1 (no verdict).
    view = StreamView("What is (5 + 9) * 2?")
    for raw in RECORDED[:3] + [
        ev(3, "token", text="14 * "),
        ev(4, "backtrack", step=1, text="14 *",
           detail="budget spent: the unfinished step is cut; the answer follows step 0"),
        ev(5, "step", step=1, text="The answer is 28."),
    ]:  # fmt: skip
        view.apply(decode(raw))
    lines = render(view).splitlines()
    assert lines[2] == (
        "   ↩ dropped from step 2  (budget spent: the unfinished step is cut; the answer follows "
        "step 0)"
    )
    assert "again from" not in render(view) and view.num_backtracks == 0
