"""Tests of the real Mooncake engine skip where it cannot be imported (the `mooncake` extra and
libibverbs1: scripts/setup.sh), unless STEPWISE_TEST_MOONCAKE=1 makes that a failure."""

from __future__ import annotations

import os

import pytest

from pipeline.transfer import mooncake


def missing(reason: str) -> None:
    """Skip for a missing resource, or fail when STEPWISE_TEST_MOONCAKE=1 asked for it."""
    if os.environ.get("STEPWISE_TEST_MOONCAKE") == "1":
        pytest.fail(f"STEPWISE_TEST_MOONCAKE=1 but {reason}")
    pytest.skip(reason)


def mooncake_or_skip() -> None:
    try:
        mooncake.engine_class()
    except mooncake.MooncakeUnavailableError as e:
        missing(f"no Mooncake transfer engine here ({e})")
