"""`stepwise` command line (`python -m pipeline.cli` runs it too)."""

from pipeline.cli.commands import WORKER_CLASSES
from pipeline.cli.main import main
from pipeline.cli.parser import build_parser

__all__ = ["WORKER_CLASSES", "build_parser", "main"]
