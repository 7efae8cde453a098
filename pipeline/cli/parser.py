"""`stepwise`'s argument parser: every subcommand, its flags and their help."""

from __future__ import annotations

import argparse

from pipeline import __version__
from pipeline.cli import budget_commands, trace_commands
from pipeline.cli.commands import (
    WORKER_CLASSES,
    _add_engine_args,
    _add_engine_choice,
    _add_format_arg,
    cmd_config,
    cmd_demo,
    cmd_eval,
    cmd_generate,
    cmd_models,
    cmd_stream,
    cmd_submit,
    cmd_up,
    cmd_verify,
    cmd_worker,
)


def _add_gateway_bind_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--host",
        default=None,
        help="gateway: the address it binds (default STEPWISE_GATEWAY_HOST, else 127.0.0.1); "
        "beyond loopback it needs API keys or --allow-open",
    )
    p.add_argument(
        "--allow-open",
        action="store_true",
        default=None,  # absent: STEPWISE_GATEWAY_ALLOW_OPEN decides
        help="gateway: serve beyond loopback with no API keys, every caller tenant `default` "
        "(logged as a warning at start); without it such a gateway refuses to start",
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="stepwise",
        description="Stepwise: serve reasoning models step by step.",
    )
    parser.add_argument("--version", action="version", version=f"stepwise {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    g = sub.add_parser(
        "generate",
        help="generate from one prompt with the native engine, streaming the text",
        description="Generate from one prompt, stream the text, report TTFT and tokens/s.",
    )
    g.add_argument("prompt")
    _add_engine_args(g)
    g.add_argument("--max-tokens", type=int, default=256)
    g.add_argument("--temperature", type=float, default=0.0, help="0 = greedy")
    g.add_argument("--top-p", type=float, default=1.0)
    g.add_argument("--top-k", type=int, default=-1)
    g.add_argument("--min-p", type=float, default=0.0)
    g.add_argument("--seed", type=int, default=None)
    chat = g.add_mutually_exclusive_group()
    chat.add_argument(
        "--chat",
        dest="chat",
        action="store_true",
        default=None,
        help="wrap the prompt in the model's chat template (default if it has one)",
    )
    chat.add_argument("--no-chat", dest="chat", action="store_false")
    g.set_defaults(func=cmd_generate)

    m = sub.add_parser(
        "models",
        help="prepare and list local models",
        description="Prepare (convert once, offline) and list the models Stepwise can load.",
    )
    from pipeline.engine import prepare

    prepare.add_arguments(m)
    m.set_defaults(func=cmd_models)

    e = sub.add_parser(
        "eval",
        help="score a model on reasoning tasks (engine only, no Kafka)",
        description="Run reasoning problems through the engine and score them.",
    )
    from pipeline.evals import runner

    runner.add_arguments(e)
    e.set_defaults(func=cmd_eval)

    from pipeline.verify import offline

    v = sub.add_parser(
        "verify",
        help="check reasoning traces offline (JSONL in, per-step and per-claim verdicts out)",
        description=offline.__doc__,
        epilog=offline.EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    offline.add_arguments(v)
    _add_format_arg(v)
    v.set_defaults(func=cmd_verify)

    w = sub.add_parser(
        "worker",
        help="run one pipeline stage (services from STEPWISE_KAFKA / STEPWISE_REDIS)",
        description="Run one pipeline stage until SIGTERM/SIGINT, which drains it.",
    )
    w.add_argument("name", choices=sorted([*WORKER_CLASSES, "verify", "gateway"]))
    w.add_argument(
        "--concurrency",
        type=int,
        default=None,
        help="verify: checker processes (default STEPWISE_VERIFY_CONCURRENCY or 1)",
    )
    _add_engine_choice(w)
    _add_format_arg(w)
    _add_gateway_bind_args(w)
    w.set_defaults(func=cmd_worker)

    u = sub.add_parser(
        "up",
        help="run the whole pipeline locally (embedded Kafka-compatible broker + Redis)",
        description="Start services (embedded unless STEPWISE_KAFKA/STEPWISE_REDIS are set), "
        "create topics, start every worker, print where everything is; Ctrl-C stops all.",
    )
    u.add_argument("--model", default=None, help="default: STEPWISE_MODEL, else tiny-reasoner")
    u.add_argument("--log-dir", default=None, help="write worker and service logs here")
    _add_engine_choice(u)
    _add_format_arg(u)
    _add_gateway_bind_args(u)
    u.set_defaults(func=cmd_up)

    s = sub.add_parser(
        "submit",
        help="publish one problem and print its steps and result",
        description="Publish a Job to the running pipeline, stream its steps, print the Result.",
    )
    s.add_argument("problem")
    s.add_argument("--id", default=None, help="job id (default: random)")
    s.add_argument("--temperature", type=float, default=0.7)
    s.add_argument("--seed", type=int, default=None)
    s.add_argument("--max-tokens", type=int, default=None)
    s.add_argument(
        "--verify",
        choices=("off", "async", "strict"),
        default="async",
        help="check each step with Z3 (async: keep decoding; strict: wait for each verdict)",
    )
    s.add_argument("--timeout", type=float, default=300.0)
    s.set_defaults(func=cmd_submit)

    st = sub.add_parser(
        "stream",
        help="solve a problem through the gateway, rendering its steps live",
        description="Submit a problem to the gateway's WebSocket (or follow a job with --job) "
        "and render the reasoning live: each step with its verdict (✓ verified, ✗ contradicted, "
        "? unknown), steps discarded by a backtrack struck out, then the answer, the thinking "
        "budget used and the stop reason. A dropped connection resumes from the last event. "
        "Exit status: 0 for an ok Result, 1 otherwise, 2 when the gateway cannot be used.",
    )
    from pipeline.client import stream_view

    stream_view.add_arguments(st)
    st.set_defaults(func=cmd_stream)

    c = sub.add_parser(
        "config",
        help="print the effective settings and where each value came from",
        description="Every STEPWISE_* setting this process would run with: its value, its "
        "source (flag, env, default) and what it does; unknown STEPWISE_* variables last. "
        "Secrets show as (set).",
    )
    c.add_argument("--json", action="store_true", help="one JSON object instead of a table")
    c.add_argument("--concern", default=None, help="only this group (services, pipeline, ...)")
    c.set_defaults(func=cmd_config)

    trace_commands.add_parsers(sub)
    budget_commands.add_parsers(sub)

    d = sub.add_parser(
        "demo",
        help="send held-out problems through the pipeline and print a summary",
        description="Send held-out problems through the pipeline (started locally unless "
        "STEPWISE_KAFKA is set), stream one job's steps, print accuracy, latency and tokens.",
    )
    d.add_argument("--n", type=int, default=24, help="number of problems")
    d.add_argument("--seed", type=int, default=7)
    d.add_argument(
        "--model",
        default="r1-reasoner",
        help="a model name or directory (default: the bundled R1-style reasoner; "
        "tiny-reasoner: the terse line-format one)",
    )
    _add_format_arg(d)
    d.set_defaults(func=cmd_demo)
    return parser
