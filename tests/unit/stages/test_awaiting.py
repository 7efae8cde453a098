"""The shutdown watchdog's view of a task: every coroutine it awaits, not just the outermost."""

from __future__ import annotations

import asyncio

from pipeline.stage.worker import awaiting


async def _inner(event: asyncio.Event) -> None:
    await event.wait()


async def _outer(event: asyncio.Event) -> None:
    await _inner(event)


async def test_awaiting_walks_down_to_the_innermost_wait() -> None:
    event = asyncio.Event()
    task = asyncio.create_task(_outer(event))
    await asyncio.sleep(0)  # let it reach its wait
    names = [w.rsplit(" ", 1)[1] for w in awaiting(task)]
    assert names[:3] == ["_outer", "_inner", "wait"]  # Event.wait, where it really waits
    assert len(awaiting(task, limit=2)) == 2
    event.set()
    await task
    assert awaiting(task) == []  # done: nothing awaited
