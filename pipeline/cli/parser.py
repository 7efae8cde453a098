"""`stepwise`'s grammar: every subcommand, its flags and their help.

Light on purpose: building it imports no model, no solver, no web stack. Each subcommand names
its handler as `module:function` (`handler`), which `main` imports only when that command runs,
so `stepwise config` or `stepwise worker budget` never load torch. The flags of `stepwise up`
and `stepwise worker` that are settings (`--model`, `--engine`, `--host`, ...) are derived from
the settings' declarations (pipeline/settings.py: a setting with a `flag`).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from pipeline import __version__, schema, settings
from pipeline.cli.help_texts import VERIFY_DESCRIPTION, VERIFY_EPILOG
from pipeline.config import SpeculativeConfig
from pipeline.evals.knobs import DEFAULT_LEVEL, LEVELS
from pipeline.formats import format_names

ENGINE_COMMANDS = "pipeline.cli.engine_commands"
STACK_COMMANDS = "pipeline.cli.stack_commands"
CLIENT_COMMANDS = "pipeline.cli.client_commands"
EVAL_MODES = ("plain", "verify-async", "verify-strict", "verify-repair", "budget")
# `stepwise worker NAME` -> the stage's worker class (a Kafka stage; verify and gateway aside).
WORKER_CLASSES = {
    "ingest": "pipeline.ingest.worker:IngestWorker",
    "prefill": "pipeline.prefill.worker:PrefillWorker",
    "decode": "pipeline.decode.worker:DecodeWorker",
    "budget": "pipeline.controller.worker:BudgetWorker",
}
WORKERS = (*WORKER_CLASSES, "verify", "gateway")


def handler(p: argparse.ArgumentParser, target: str) -> None:
    """The command's handler, by name: imported when it runs."""
    p.set_defaults(handler=target)


def add_setting_flags(p: argparse.ArgumentParser, exclude: tuple[str, ...] = ()) -> None:
    """Every setting declared with a flag, as that flag (absent: the environment decides).
    `dest` is the setting's name, which `main` hands to the settings as a flag value."""
    for v in settings.declared_vars():
        if v.flag is None or v.flag in exclude:
            continue
        help_ = f"{v.help} (default: {v.env}, else {v.default or 'unset'})"
        if v.kind is settings.parse_bool:
            p.add_argument(v.flag, dest=v.name, action="store_true", default=None, help=help_)
            continue
        choices = list(v.choices) or None
        if v.name == "REASONING_FORMAT":
            choices = format_names()
        p.add_argument(v.flag, dest=v.name, default=None, choices=choices, help=help_)


def add_engine_args(p: argparse.ArgumentParser) -> None:
    """What `generate` loads: a model, how it writes, its dtype, device and threads."""
    p.add_argument(
        "--model",
        default="tiny-reasoner",
        help="checkpoint dir or a known name: tiny-reasoner (bundled), smollm2 (prepared)",
    )
    add_format_arg(p)
    p.add_argument("--dtype", default="auto", choices=["auto", "float32", "bfloat16", "float16"])
    p.add_argument("--device", default="auto", help="auto | cpu | cuda | cuda:N")
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads")


def add_format_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--reasoning-format",
        default=None,
        choices=format_names(),
        help="how the model writes its reasoning (default: detected from the model; "
        "docs/reasoning-formats.md)",
    )


def add_eval_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--model",
        default="tiny-reasoner",
        help="a known name (tiny-reasoner, smollm2: see `stepwise models list`) or an HF "
        "model directory",
    )
    add_format_arg(parser)
    parser.add_argument(
        "--tasks",
        default="indist",
        help="comma list of families (arith, linear, system, word, drill, product, signed, "
        "story), groups (indist: the tiny reasoner's four families; broad: the R1-style "
        "reasoner's seven) and reasoning-gym tasks (rg:basic_arithmetic, rg:chain_sum, "
        "rg:gsm_symbolic)",
    )
    parser.add_argument(
        "--n", type=int, default=100, help="problems per task (a group's n split over its families)"
    )
    parser.add_argument("--seed", type=int, default=0, help="problem seed (held-out: < 1000000)")
    parser.add_argument(
        "--level",
        choices=sorted(LEVELS),
        default=DEFAULT_LEVEL,
        help="difficulty mix of our families (default: what the tiny reasoner was trained on)",
    )
    parser.add_argument("--temperature", type=float, default=0.7)
    parser.add_argument("--max-tokens", type=int, default=256)
    parser.add_argument(
        "--mode",
        choices=EVAL_MODES,
        default="plain",
        help="plain: no verification; verify-async / verify-strict: every step checked by "
        "the Z3 checker in a separate process, contradicted claims rolled back and resampled; "
        "verify-repair: async, and a wrong arithmetic value is replaced by the right one as it "
        "is written; budget: no "
        "verification, the answer forced at --max-thinking-tokens / --max-steps",
    )
    parser.add_argument(
        "--max-thinking-tokens", type=int, default=None, help="thinking budget (any mode)"
    )
    parser.add_argument("--max-steps", type=int, default=None, help="step budget (any mode)")
    parser.add_argument(
        "--early-exit", action="store_true", help="answer probes at step ends; exit on agreement"
    )
    parser.add_argument(
        "--max-retries", type=int, default=8, help="resamples of a contradicted step (verify)"
    )
    parser.add_argument(
        "--max-backtracks", type=int, default=32, help="backtracks per problem (verify)"
    )
    parser.add_argument("--out", default=None, help="write the JSON report here")
    parser.add_argument("--batch-size", type=int, default=64, help="prompts per engine call")
    parser.add_argument(
        "--engine",
        choices=("native", "vllm", "hf"),
        default="native",
        help="vllm: a vLLM server (STEPWISE_VLLM_URL or --vllm-url, else one is started)",
    )
    parser.add_argument("--vllm-url", default=None, help="a running vLLM OpenAI server")
    parser.add_argument(
        "--keep-completions", action="store_true", help="put every completion in the JSON"
    )
    parser.add_argument("--dtype", default="float32")


def add_stream_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("problem", nargs="?", help="the problem to solve (omit with --job)")
    p.add_argument(
        "--url",
        default=None,
        help="the gateway: ws://host:port or http://host:port (default: $STEPWISE_GATEWAY_URL, "
        "else ws://127.0.0.1:$STEPWISE_GATEWAY_PORT, port 8000)",
    )
    p.add_argument(
        "--api-key",
        default=None,
        help="API key when the gateway has keys on (default: $STEPWISE_API_KEY)",
    )
    p.add_argument("--job", default=None, help="follow this job id instead of submitting")
    p.add_argument("--from-seq", type=int, default=0, help="with --job: start at this event seq")
    p.add_argument("--id", default=None, help="job id to submit under (default: random)")
    p.add_argument("--temperature", type=float, default=None, help="default: the pipeline's")
    p.add_argument("--seed", type=int, default=None)
    p.add_argument("--max-tokens", type=int, default=None, help="cap on generated tokens")
    p.add_argument(
        "--verify",
        choices=schema.VERIFY_MODES,
        default=None,
        help="check each step (async: keep decoding; strict: wait for each verdict; repair: "
        "async, wrong arithmetic values replaced as they are written)",
    )
    p.add_argument(
        "--tokens", action="store_true", help="also stream the text as it is written (dimmed)"
    )
    p.add_argument("--timeout", type=float, default=300.0, help="seconds to wait for the Result")


def speculative_config(text: str) -> SpeculativeConfig | None:
    try:
        return SpeculativeConfig.from_json(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


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
    add_engine_args(g)
    g.add_argument("--max-tokens", type=int, default=256)
    g.add_argument("--temperature", type=float, default=0.0, help="0 = greedy")
    g.add_argument("--top-p", type=float, default=1.0)
    g.add_argument("--top-k", type=int, default=-1)
    g.add_argument("--min-p", type=float, default=0.0)
    g.add_argument("--seed", type=int, default=None)
    g.add_argument(
        "--speculative-config",
        default="",
        type=speculative_config,
        help='vLLM\'s JSON, e.g. \'{"method": "ngram", "num_speculative_tokens": 4}\' or '
        '\'{"method": "suffix"}\': proposed tokens checked in one forward pass; the same '
        "output as without. Each step's proposals are cut to what pays at the batch "
        '("size_by_cost": false verifies all, as vLLM does)',
    )
    chat = g.add_mutually_exclusive_group()
    chat.add_argument(
        "--chat",
        dest="chat",
        action="store_true",
        default=None,
        help="wrap the prompt in the model's chat template (default if it has one)",
    )
    chat.add_argument("--no-chat", dest="chat", action="store_false")
    handler(g, f"{ENGINE_COMMANDS}:cmd_generate")

    m = sub.add_parser(
        "models",
        help="prepare and list local models",
        description="Prepare (convert once, offline) and list the models Stepwise can load.",
    )
    msub = m.add_subparsers(dest="models_command", required=True)
    prep = msub.add_parser("prepare", help="convert a shipped model into a safetensors directory")
    prep.add_argument("name", choices=["smollm2", "r1-reasoner"])
    prep.add_argument(
        "--dest", type=Path, default=None, help="default: in STEPWISE_MODELS_DIR's folder"
    )
    prep.add_argument("--force", action="store_true", help="convert again even if present")
    msub.add_parser("list", help="known models and where they are")
    handler(m, f"{ENGINE_COMMANDS}:cmd_models")

    e = sub.add_parser(
        "eval",
        help="score a model on reasoning tasks (engine only, no Kafka)",
        description="Run reasoning problems through the engine and score them.",
    )
    add_eval_args(e)
    handler(e, f"{ENGINE_COMMANDS}:cmd_eval")

    v = sub.add_parser(
        "verify",
        help="check reasoning traces offline (JSONL in, per-step and per-claim verdicts out)",
        description=VERIFY_DESCRIPTION,
        epilog=VERIFY_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    v.add_argument("input", help="JSONL file of traces, or - for stdin")
    v.add_argument("--timeout-ms", type=int, default=200, help="solver time per step (default 200)")
    v.add_argument(
        "--stats", action="store_true", help="print traces, steps and checks/s to stderr"
    )
    add_format_arg(v)
    handler(v, "pipeline.cli.check_commands:cmd_verify")

    w = sub.add_parser(
        "worker",
        help="run one pipeline stage (services from STEPWISE_KAFKA / STEPWISE_REDIS)",
        description="Run one pipeline stage until SIGTERM/SIGINT, which drains it.",
    )
    w.add_argument("name", choices=sorted(WORKERS))
    add_setting_flags(w, exclude=("--model",))
    handler(w, f"{STACK_COMMANDS}:cmd_worker")

    u = sub.add_parser(
        "up",
        help="run the whole pipeline locally (embedded Kafka-compatible broker + Redis)",
        description="Start services (embedded unless STEPWISE_KAFKA/STEPWISE_REDIS are set), "
        "create topics, start every worker, print where everything is; Ctrl-C stops all.",
    )
    u.add_argument("--log-dir", default=None, help="write worker and service logs here")
    add_setting_flags(u, exclude=("--concurrency",))
    handler(u, f"{STACK_COMMANDS}:cmd_up")

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
        choices=schema.VERIFY_MODES,
        default="async",
        help="check each step with Z3 (async: keep decoding; strict: wait for each verdict; "
        "repair: async, wrong arithmetic values replaced as they are written)",
    )
    s.add_argument("--timeout", type=float, default=300.0)
    handler(s, f"{CLIENT_COMMANDS}:cmd_submit")

    st = sub.add_parser(
        "stream",
        help="solve a problem through the gateway, rendering its steps live",
        description="Submit a problem to the gateway's WebSocket (or follow a job with --job) "
        "and render the reasoning live: each step with its verdict (✓ verified, ✗ contradicted, "
        "? unknown, – nothing to check), steps discarded by a backtrack struck out, then the "
        "answer, the thinking budget used and the stop reason. A dropped connection resumes "
        "from the last event. Exit status: 0 for an ok Result, 1 otherwise, 2 when the gateway "
        "cannot be used.",
    )
    add_stream_args(st)
    handler(st, f"{CLIENT_COMMANDS}:cmd_stream")

    c = sub.add_parser(
        "config",
        help="print the effective settings and where each value came from",
        description="Every STEPWISE_* setting this process would run with: its value, its "
        "source (flag, env, default) and what it does; unknown STEPWISE_* variables last. "
        "Secrets show as (set).",
    )
    c.add_argument("--json", action="store_true", help="one JSON object instead of a table")
    c.add_argument("--concern", default=None, help="only this group (services, pipeline, ...)")
    handler(c, f"{CLIENT_COMMANDS}:cmd_config")

    t = sub.add_parser(
        "trace",
        help="a job's span tree: what ran where, when and for how long",
        description="Reads the local span store (STEPWISE_TRACE_DIR) and prints the trace of "
        "JOB_ID: each span's start (from the trace's start), duration, process and status; "
        "backtracks, forced answers and verdicts as events. Jobs are traced when "
        "STEPWISE_TRACE_SAMPLE > 0.",
    )
    t.add_argument("job_id")
    t.add_argument("--json", action="store_true", help="the tree as JSON")
    t.add_argument("--dir", default="", help="span store folder (default: STEPWISE_TRACE_DIR)")
    handler(t, "pipeline.cli.trace_commands:cmd_trace")
    p = sub.add_parser(
        "paths",
        help="the anomaly-path graph: calls between instances, weighted, heaviest paths first",
        description="Builds the weighted directed graph of the spans in the window: nodes are "
        "instances (service@host:pid), edges calls with their count, p99, error rate and "
        "retries, weight (1 - success rate) * log(p99 ms + 1); prints the edges and the "
        "heaviest paths, and writes the graph as SVG with --svg.",
    )
    p.add_argument(
        "--window-s", type=float, default=0.0, help="only spans of the last N s (0: all)"
    )
    p.add_argument("--top", type=int, default=3, help="how many heaviest paths to print")
    p.add_argument("--svg", default="", help="write the graph to this SVG file")
    p.add_argument("--json", action="store_true", help="edges and paths as JSON")
    p.add_argument("--dir", default="", help="span store folder (default: STEPWISE_TRACE_DIR)")
    handler(p, "pipeline.cli.trace_commands:cmd_paths")

    b = sub.add_parser(
        "budget",
        help="the budget controller: live limits per SLO class and why (`budget status`)",
        description="The thinking-budget controller (docs/budget.md).",
    )
    bsub = b.add_subparsers(dest="budget_command", metavar="SUBCOMMAND", required=True)
    bs = bsub.add_parser(
        "status",
        help="each class's live limits, the law's inputs, its last decision and why",
        description="Reads the state the budget worker keeps in Redis (STEPWISE_REDIS): per "
        "SLO class the limits in force (thinking tokens, steps, the resample cap, early exit, "
        "the share of new jobs refused) and the rung of the actuator ladder they are on; what "
        "the law read (the predicted latency over the SLO, from a job admitted now, the "
        "running jobs and the completed ones; the pace; the queue; arrivals) and what it did.",
    )
    bs.add_argument("--watch", action="store_true", help="redraw every --interval seconds")
    bs.add_argument("--interval", type=float, default=1.0, help="seconds between redraws")
    bs.add_argument("--json", action="store_true", help="the raw state as JSON")
    handler(bs, "pipeline.cli.budget_commands:cmd_budget_status")

    d = sub.add_parser(
        "demo",
        help="send held-out problems through the pipeline and print a summary",
        description="Send held-out problems through the pipeline (started locally unless "
        "STEPWISE_KAFKA is set), stream one job's steps, print accuracy, latency and tokens; "
        "then send the same problems with verification off and print what the verify mode "
        "gained (accuracy) and cost (problems/s).",
    )
    d.add_argument("--n", type=int, default=24, help="number of problems")
    d.add_argument(
        "--verify",
        choices=schema.VERIFY_MODES,
        default=None,
        help="the jobs' verify mode (default repair: wrong arithmetic repaired as it is "
        "written; docs/verification.md)",
    )
    d.add_argument(
        "--no-compare",
        dest="compare",
        action="store_false",
        help="skip the second run with verification off (half the demo's time)",
    )
    d.add_argument("--seed", type=int, default=7)
    d.add_argument(
        "--model",
        default="r1-reasoner",
        help="a model name or directory (default: the bundled R1-style reasoner; "
        "tiny-reasoner: the terse line-format one)",
    )
    add_format_arg(d)
    handler(d, f"{STACK_COMMANDS}:cmd_demo")
    return parser
