"""retry_transient: retriable Kafka errors are retried until a deadline; others are not."""

from __future__ import annotations

import pytest
from aiokafka.errors import NodeNotReadyError, UnsupportedVersionError

from pipeline.bus import retry_transient


class Flaky:
    """Fails with `error` the first `failures` calls, then returns "up"."""

    def __init__(self, failures: int, error: Exception):
        self.failures, self.error, self.calls = failures, error, 0

    async def __call__(self) -> str:
        self.calls += 1
        if self.calls <= self.failures:
            raise self.error
        return "up"


async def test_a_retriable_error_is_retried_until_the_call_succeeds(caplog):
    call = Flaky(2, NodeNotReadyError("node 111 not ready"))
    assert await retry_transient("starting", call, timeout_s=10) == "up"
    assert call.calls == 3
    assert caplog.text.count("starting failed") == 2  # each retry is logged


async def test_a_non_retriable_error_is_raised_at_once():
    call = Flaky(1, UnsupportedVersionError("no"))
    assert not UnsupportedVersionError.retriable
    with pytest.raises(UnsupportedVersionError):
        await retry_transient("starting", call, timeout_s=10)
    assert call.calls == 1


async def test_a_retriable_error_past_the_deadline_is_raised():
    call = Flaky(100, NodeNotReadyError("down"))
    with pytest.raises(NodeNotReadyError):
        await retry_transient("starting", call, timeout_s=0.5)
    assert 2 <= call.calls < 10  # backoff 0.2 s, 0.4 s: then the deadline
