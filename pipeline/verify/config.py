"""The verify workers' settings (`stepwise worker verify`)."""

from __future__ import annotations

from dataclasses import dataclass

from pipeline.settings import declared, setting


@declared
@dataclass(frozen=True, slots=True)
class VerifyConfig:
    """How many checkers a verify worker runs, and a test's injected slowness."""

    concurrency: int = setting(
        1, env="VERIFY_CONCURRENCY", concern="verify", flag="--concurrency",
        help="checker processes per verify worker",
    )  # fmt: skip
    test_delay_ms: float = setting(
        0.0, env="VERIFY_TEST_DELAY_MS", concern="verify",
        help="test knob: pool child 0 sleeps this long before each check (an injected slow "
        "worker)",
    )  # fmt: skip
