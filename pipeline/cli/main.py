"""`stepwise`'s entry: settings built once (flags over environment over defaults), then the
subcommand; errors as `stepwise: error [code]: ...` with exit status 2."""

from __future__ import annotations

import argparse
import sys

from pipeline.cli.commands import cmd_config, cmd_up, cmd_worker
from pipeline.cli.parser import build_parser
from pipeline.errors import StepwiseError

# Flags that are settings (`stepwise up` / `stepwise worker`): the flag wins over the env.
FLAG_SETTINGS = {
    "model": "MODEL",
    "engine": "ENGINE",
    "reasoning_format": "REASONING_FORMAT",
    "concurrency": "VERIFY_CONCURRENCY",
    "host": "GATEWAY_HOST",
    "allow_open": "GATEWAY_ALLOW_OPEN",
}


def load_settings(args: argparse.Namespace):
    """This process's settings, built once: the flags of the commands that run the pipeline
    over the environment over the defaults; unknown STEPWISE_* variables reported."""
    from pipeline import settings

    flags = {}
    if getattr(args, "func", None) in (cmd_worker, cmd_up, cmd_config):
        flags = {name: getattr(args, attr, None) for attr, name in FLAG_SETTINGS.items()}
    current = settings.Settings.load(flags=flags)
    settings.install(current)
    for line in current.unknown_report():
        if args.func is not cmd_config:  # config lists them itself
            print(f"stepwise: warning: {line}", file=sys.stderr)
    return current


def main(argv: list[str] | None = None) -> int:
    from pipeline import settings

    try:  # the environment's first: building the parser may read a setting (the models dir)
        settings.install(settings.Settings.load())
        args = build_parser().parse_args(argv)
        load_settings(args)
    except ValueError as e:  # a bad STEPWISE_* value: the message names it
        print(f"stepwise: error [bad_setting]: {e}", file=sys.stderr)
        return 2
    try:
        return int(args.func(args) or 0)
    except StepwiseError as e:
        print(f"stepwise: error [{e.code}]: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
