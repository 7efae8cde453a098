"""`python -m pipeline.cli`: the `stepwise` command."""

import sys

from pipeline.cli.main import main

# Guarded: a spawned child process (decode's engine core) imports the parent's main module.
if __name__ == "__main__":
    sys.exit(main())
