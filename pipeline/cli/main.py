"""`stepwise`'s entry: every setting declared, the settings built once (flags over environment
over defaults), then the subcommand's handler imported and run; errors as
`stepwise: error [code]: ...` with exit status 2."""

from __future__ import annotations

import argparse
import importlib
import os
import sys

from pipeline import settings
from pipeline.cli import declarations
from pipeline.cli.parser import build_parser
from pipeline.errors import StepwiseError

assert declarations.MODULES  # imported for their declarations: every setting is known now


def load_settings(args: argparse.Namespace) -> settings.Settings:
    """This process's settings, built once: the flags that are settings (their `dest` is the
    setting's name) over the environment over the defaults; unknown STEPWISE_* variables
    reported."""
    flags = {v.name: getattr(args, v.name, None) for v in settings.declared_vars() if v.flag}
    current = settings.Settings.load(flags=flags)
    settings.install(current)
    if args.command != "config":  # `stepwise config` lists them itself
        for line in current.unknown_report():
            print(f"stepwise: warning: {line}", file=sys.stderr)
    return current


def run_handler(args: argparse.Namespace) -> int:
    """The command's handler (`module:function`), imported now: only what it needs loads."""
    module, _, name = args.handler.partition(":")
    return int(getattr(importlib.import_module(module), name)(args) or 0)


def main(argv: list[str] | None = None) -> int:
    try:
        args = build_parser().parse_args(argv)
        load_settings(args)
    except ValueError as e:  # a bad STEPWISE_* value: the message names it
        print(f"stepwise: error [bad_setting]: {e}", file=sys.stderr)
        return 2
    try:
        return run_handler(args)
    except StepwiseError as e:
        print(f"stepwise: error [{e.code}]: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # `stepwise config | head`: the reader left; not an error of ours
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no second one at exit
        return 0
