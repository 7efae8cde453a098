"""`stepwise eval`: run task families through the engine and score the reasoning.

    stepwise eval --tasks indist,rg:basic_arithmetic --n 500 --seed 0 --out eval.json

Drives the engine directly (no Kafka). Prints a table to stdout, a progress bar to stderr, and
writes JSON with accuracy, mean / p95 completion tokens, mean steps, well-formed-step rate,
equation-correct rate, wall time, tokens/s and a per-family breakdown.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from collections import Counter, defaultdict
from pathlib import Path

from tqdm import tqdm

from pipeline import schema
from pipeline.config import PipelineConfig
from pipeline.errors import StepwiseError
from pipeline.evals import tasks as task_registry
from pipeline.evals.completers import Completion, make_completer
from pipeline.evals.problems import Problem, format_prompt
from pipeline.evals.scoring import TraceScore
from pipeline.evals.verified import generate_verified
from pipeline.formats import format_for
from pipeline.models.resolve import resolve_model
from pipeline.verify.local import LocalVerifier

DEFAULT_MODEL = Path(__file__).resolve().parents[1] / "assets" / "tiny-reasoner"
MODES = ("plain", "verify-async", "verify-strict", "verify-repair", "budget")
AVAILABLE_MODES = MODES
NUM_SAMPLES = 3  # completions kept in the JSON per family, for eyeballing


def _p95(values: list[int]) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    return float(ordered[min(len(ordered) - 1, math.ceil(0.95 * len(ordered)) - 1)])


def summarize(rows: list[tuple[TraceScore, float, Completion]], fmt=None) -> dict:
    """Aggregate figures over (trace score, answer score, completion) rows; `in_format_rate`:
    the share of completions in the reasoning format `fmt` (thinking closed, answer after it)."""
    n = len(rows)
    in_format = sum(fmt.well_formed(c.text) for _, _, c in rows) if fmt is not None else 0
    lines = sum(t.num_lines for t, _, _ in rows)
    equations = sum(t.num_equations for t, _, _ in rows)
    tokens = [c.num_tokens for _, _, c in rows]
    return {
        "num_problems": n,
        "accuracy": sum(s >= 1.0 for _, s, _ in rows) / n if n else 0.0,
        "mean_score": sum(s for _, s, _ in rows) / n if n else 0.0,
        "mean_completion_tokens": sum(tokens) / n if n else 0.0,
        "p95_completion_tokens": _p95(tokens),
        "mean_steps": sum(t.num_steps for t, _, _ in rows) / n if n else 0.0,
        "well_formed_rate": sum(t.num_well_formed for t, _, _ in rows) / lines if lines else 0.0,
        "in_format_rate": in_format / n if n else 0.0,
        "equation_correct_rate": (
            sum(t.num_equations_right for t, _, _ in rows) / equations if equations else 0.0
        ),
        "num_lines": lines,
        "num_equations": equations,
        "finish_reasons": dict(Counter(str(c.finish_reason) for _, _, c in rows)),
    }


def evaluate(args: argparse.Namespace) -> dict:
    names = task_registry.parse_tasks(args.tasks)
    problems: list[Problem] = []
    for name in names:
        problems.extend(task_registry.load_problems(name, args.n, args.seed, args.level))
    vllm_url = getattr(args, "vllm_url", None) or PipelineConfig.from_settings().vllm_url
    model_dir = resolve_model(args.model)
    fmt_name = getattr(args, "reasoning_format", None)
    backend = make_completer(args.engine, model_dir, args.dtype, vllm_url, fmt_name)
    fmt = format_for(model_dir, fmt_name)
    prompts = eval_prompts(problems, backend, fmt)
    # Per-request sampling seeds derived from the problem seed: the run is reproducible.
    seeds = [args.seed * 1_000_003 + i for i in range(len(problems))]
    generate, verifier = backend.generate, None
    if args.engine != "hf":  # our engines: every problem through the loop serving runs
        generate, verifier = _loop_generate(backend, problems, args)
    elif args.mode != "plain" or args.early_exit or args.max_thinking_tokens:
        raise StepwiseError(f"--mode {args.mode} and budgets need --engine native or vllm")
    completions: list[Completion] = []
    start = time.perf_counter()
    try:
        with tqdm(total=len(problems), desc="eval", unit="problem", file=sys.stderr) as bar:
            for lo in range(0, len(problems), args.batch_size):
                hi = lo + args.batch_size
                completions += generate(
                    prompts[lo:hi], args.temperature, args.max_tokens, seeds[lo:hi]
                )
                bar.update(len(prompts[lo:hi]))
        wall = time.perf_counter() - start
    finally:
        if verifier is not None:
            verifier.close()
        if hasattr(backend, "close"):  # the vLLM backend stops a server it started
            backend.close()

    rows: list[tuple[TraceScore, float, Completion]] = []
    by_family: dict[str, list] = defaultdict(list)
    samples: dict[str, list] = defaultdict(list)
    for problem, comp in zip(problems, completions, strict=True):
        trace, answer_score = task_registry.score(problem, comp.text, fmt)
        rows.append((trace, answer_score, comp))
        by_family[problem.family].append((trace, answer_score, comp))
        if len(samples[problem.family]) < NUM_SAMPLES:
            samples[problem.family].append(
                {
                    "question": problem.question,
                    "gold": problem.answer,
                    "completion": comp.text,
                    "correct": answer_score >= 1.0,
                }
            )
    total_tokens = sum(c.num_tokens for c in completions)
    report = {
        "model": str(args.model),
        "reasoning_format": fmt.name,
        "chat_template": not isinstance(prompts[0], str) if prompts else False,
        "engine": args.engine,
        "mode": args.mode,
        "tasks": names,
        "n": args.n,
        "seed": args.seed,
        "level": args.level,
        "temperature": args.temperature,
        "max_tokens": args.max_tokens,
        **summarize(rows, fmt),
        "wall_s": wall,
        "completion_tokens": total_tokens,
        "tokens_per_s": total_tokens / wall if wall > 0 else 0.0,
        **verification_summary(completions),
        "per_family": {fam: summarize(r, fmt) for fam, r in by_family.items()},
        "samples": dict(samples),
    }
    if getattr(args, "keep_completions", False):
        report["completions"] = [
            {
                "family": p.family,
                "question": p.question,
                "gold": p.answer,
                "text": c.text,
                "num_tokens": c.num_tokens,
                "finish_reason": c.finish_reason,
            }
            for p, c in zip(problems, completions, strict=True)
        ]
    return report


def _loop_generate(backend, problems: list[Problem], args: argparse.Namespace):
    """A generate function with the completer's signature that runs every problem as decode
    would run its job, through the reasoning loop (pipeline/evals/verified.py): the verify
    mode, early exit, the thinking and step caps, the pipeline's default budget."""
    verify = args.mode.removeprefix("verify-") if args.mode.startswith("verify-") else "off"
    fmt = backend.engine.reasoning_format
    # The verifier reads the question (never the prompt's template), keyed by the prompt.
    by_prompt = {
        _key(p): (q.question, tuple(q.premises))
        for p, q in zip(eval_prompts(problems, backend, fmt), problems, strict=True)
    }
    verifier = LocalVerifier() if verify != "off" else None
    pipeline = PipelineConfig(max_retries=args.max_retries, max_backtracks=args.max_backtracks)

    def generate(prompts, temperature, max_tokens, seeds):
        params = [
            schema.JobParams(
                temperature=temperature,
                seed=seed,
                max_tokens=max_tokens,
                verify=verify,
                early_exit=args.early_exit,
                max_thinking_tokens=args.max_thinking_tokens,
                max_steps=args.max_steps,
                stream="none",
            )  # fmt: skip
            for seed in seeds
        ]
        found = [by_prompt[_key(p)] for p in prompts]
        return generate_verified(
            backend.engine, prompts, [f[1] for f in found], params, verifier,
            questions=[f[0] for f in found], pipeline=pipeline,
        )  # fmt: skip

    return generate, verifier


# What a chat model is told besides the question, so that its answer can be found (the
# convention DeepSeek recommends for R1: an answer in \boxed{}; plain chat models: a sentence).
BOXED_INSTRUCTION = "Please reason step by step, and put your final answer within \\boxed{}."
PLAIN_INSTRUCTION = "Solve it step by step. End with: The answer is <number>."


def eval_prompts(problems: list[Problem], backend, fmt) -> list:
    """The prompts `stepwise eval` sends through `backend` (see `prompts_for`)."""
    return prompts_for(problems, getattr(getattr(backend, "engine", None), "tokenizer", None), fmt)


def prompts_for(problems: list[Problem], tokenizer, fmt) -> list:
    """The tiny reasoner's own prompt (`Q: ...`), or, for a model with a chat template, the
    question as a user message with the format's answer instruction."""
    instruction = answer_instruction(fmt)
    if instruction is None or tokenizer is None or not tokenizer.has_chat_template:
        return [format_prompt(p) for p in problems]
    return [[{"role": "user", "content": chat_content(p, instruction)}] for p in problems]


def answer_instruction(fmt) -> str | None:
    """What a chat prompt asks for the answer: a box where the format boxes it; None for the
    tiny reasoner, which is prompted with its own problem line."""
    if fmt.name == "tiny":
        return None
    return BOXED_INSTRUCTION if fmt.boxes_answer else PLAIN_INSTRUCTION


def chat_content(problem: Problem, instruction: str) -> str:
    """The user message for one problem."""
    return f"{problem.question}\n{instruction}"


def _key(prompt) -> str:
    return prompt if isinstance(prompt, str) else prompt[-1]["content"]


def verification_summary(completions: list[Completion]) -> dict:
    """Backtracks, wasted tokens and the verdict mix (zeros for unverified runs)."""
    n = len(completions) or 1
    verdicts = Counter(v for c in completions for v in getattr(c, "verdicts", ()))
    return {
        "backtracks": sum(getattr(c, "backtracks", 0) for c in completions),
        "wasted_tokens": sum(getattr(c, "wasted_tokens", 0) for c in completions),
        "mean_wasted_tokens": sum(getattr(c, "wasted_tokens", 0) for c in completions) / n,
        "checks": sum(getattr(c, "checks", 0) for c in completions),
        "gave_up": sum(getattr(c, "gave_up", False) for c in completions),
        "probe_tokens": sum(getattr(c, "probe_tokens", 0) for c in completions),
        "stop_reasons": dict(Counter(getattr(c, "stop_reason", "") for c in completions)),
        "verdicts": dict(verdicts),
    }


def format_table(report: dict) -> str:
    head = f"{'family':<22}{'n':>5}{'acc':>8}{'fmt':>8}{'wf':>8}{'eq ok':>8}{'steps':>7}"
    head += f"{'tok':>7}{'p95':>6}"
    lines = [head, "-" * len(head)]

    def row(name: str, s: dict) -> str:
        return (
            f"{name:<22}{s['num_problems']:>5}{s['accuracy']:>8.1%}"
            f"{s.get('in_format_rate', 0.0):>8.1%}{s['well_formed_rate']:>8.1%}"
            f"{s['equation_correct_rate']:>8.1%}{s['mean_steps']:>7.2f}"
            f"{s['mean_completion_tokens']:>7.1f}{s['p95_completion_tokens']:>6.0f}"
        )

    for fam, s in report["per_family"].items():
        lines.append(row(fam, s))
    lines.append("-" * len(head))
    lines.append(row("all", report))
    lines.append(
        f"wall {report['wall_s']:.1f} s, {report['completion_tokens']} completion tokens, "
        f"{report['tokens_per_s']:.1f} tok/s, engine {report['engine']}, mode {report['mode']}, "
        f"T={report['temperature']}"
    )
    if report["mode"] != "plain" or set(report.get("stop_reasons", {})) - {""}:
        lines.append(
            f"checks {report['checks']}, backtracks {report['backtracks']}, wasted tokens "
            f"{report['wasted_tokens']} ({report['mean_wasted_tokens']:.1f}/problem), gave up "
            f"{report['gave_up']}, verdicts {report['verdicts']}, probe tokens "
            f"{report['probe_tokens']}, stop reasons {report['stop_reasons']}"
        )
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    if args.mode not in AVAILABLE_MODES:
        print(
            f"stepwise eval: mode {args.mode} is not available yet (available: "
            f"{', '.join(AVAILABLE_MODES)})",
            file=sys.stderr,
        )
        return 2
    try:
        task_registry.parse_tasks(args.tasks)
    except ValueError as exc:
        print(f"stepwise eval: {exc}", file=sys.stderr)
        return 2
    if args.n < 1:
        print("stepwise eval: --n must be at least 1", file=sys.stderr)
        return 2
    try:
        report = evaluate(args)
    except task_registry.rg_adapter.ReasoningGymUnavailable as exc:
        print(f"stepwise eval: {exc}", file=sys.stderr)
        return 2
    except (StepwiseError, OSError) as exc:  # a model dir that does not load, mostly
        print(f"stepwise eval: {exc}", file=sys.stderr)
        return 1
    print(format_table(report))
    if args.out:
        Path(args.out).write_text(json.dumps(report, indent=2) + "\n")
    return 0
