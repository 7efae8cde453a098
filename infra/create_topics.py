"""Create the pipeline's topics on STEPWISE_KAFKA, then exit: the compose stack's `topics` job.

Idempotent (existing topics are fine), and it retries while the broker is still electing its
controller, so `docker compose up` does not depend on the healthcheck's timing alone.
"""

from __future__ import annotations

import asyncio
import os
import sys
import time

from pipeline.local.services import create_topics
from pipeline.topics import DEFAULT_PREFIX, Topics


async def main(deadline_s: float = 120.0) -> int:
    bootstrap = os.environ.get("STEPWISE_KAFKA") or ""
    if not bootstrap:
        print("create_topics: set STEPWISE_KAFKA", file=sys.stderr)
        return 2
    partitions = Topics(os.environ.get("STEPWISE_TOPIC_PREFIX") or DEFAULT_PREFIX).partitions()
    deadline = time.monotonic() + deadline_s
    while True:
        try:
            await create_topics(bootstrap, list(partitions), partitions, timeout=30.0)
        except Exception as e:  # broker not ready yet: connection refused, no controller, ...
            if time.monotonic() > deadline:
                print(f"create_topics: giving up: {e!r}", file=sys.stderr)
                return 1
            print(f"create_topics: retrying ({e!r})", file=sys.stderr)
            await asyncio.sleep(2.0)
            continue
        for name, n in partitions.items():
            print(f"topic {name}: {n} partition(s)")
        return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
