"""The gateway's whole shutdown is bounded from its first SIGTERM: a clean-clone CI run saw it
still shutting down 60 s after SIGTERM (twice), when `stepwise up` killed it."""

from __future__ import annotations

import signal

import uvicorn

from pipeline.gateway import main


def test_the_first_exit_signal_arms_the_deadline_once(monkeypatch):
    armed: list[tuple[float, int]] = []
    monkeypatch.setattr(main, "exit_within", lambda s, code, **kw: armed.append((s, code)))

    async def app(scope, receive, send):  # never served
        raise AssertionError

    server = main._Server(uvicorn.Config(app))
    server.handle_exit(signal.SIGTERM, None)
    server.handle_exit(signal.SIGTERM, None)  # a second signal: uvicorn forces exit, no re-arm
    assert armed == [(main.SHUTDOWN_DEADLINE_S, 0)] and server.should_exit
    assert main.SHUTDOWN_DEADLINE_S + 10 < 60  # well before `stepwise up` kills it
