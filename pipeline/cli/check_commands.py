"""`stepwise verify`: reasoning traces checked offline (no engine, no pipeline)."""

from __future__ import annotations

import argparse

from pipeline.verify import offline


def cmd_verify(args: argparse.Namespace) -> int:
    return offline.run(args)
