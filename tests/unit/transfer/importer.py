"""Runs an importer script in a child process: the KV must cross real process boundaries."""

import json
import os
import subprocess
import sys
import textwrap

# The end of every importer script: decode `seq` to its end on `engine` and report.
REPORT = textwrap.dedent(
    """
    while engine.has_unfinished():
        engine.step()
    print(json.dumps({"tokens": seq.output_token_ids,
                      "recomputed": engine.stats.num_prefill_tokens}))
    """
)


def run_importer(code: str, msg: dict) -> dict:
    """`code` reads `msg` as JSON on stdin and prints one JSON line last; returns it."""
    out = subprocess.run(
        [sys.executable, "-c", code],
        input=json.dumps(msg),
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": os.getcwd()},
    )
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout.strip().splitlines()[-1])
