"""Step-wise reasoning on each engine: the native engine's pause/rollback vs vLLM resubmission.

    python bench/stepwise_vs_vllm.py [--model tiny-reasoner] [--tasks indist] [--n 128]
        [--seed 0] [--verify async] [--max-tokens 256]
        [--sides native,native+ngram,vllm-step,vllm-stream] [--rounds 3] [--threads 2]
        [--vllm-threads 1] [--suffix-config JSON] [--json-out FILE]
    python bench/stepwise_vs_vllm.py --model r1-reasoner --tasks broad --n 8 --max-tokens 512

The workload: `--n` held-out problems of `--tasks` (default: the tiny reasoner's families,
`indist`; `broad` for a chat model), prompts as `stepwise eval` sends them (the tiny reasoner's
own line, or the chat template with the format's answer instruction), temperature 0.7, every
step checked by the Z3 checker in a separate process (verify async: decoding goes on while a
step is checked; a contradicted step is rolled back and resampled with a new seed). All problems
arrive at once; each side runs the same Reasoner and checker through the eval path
(pipeline/evals/verified.py), in this process, not through Kafka: on 2 cores the broker, Redis
and Celery would cost more than the engines and blur the figure.

Sides: `native` (our engine: a rollback truncates the KV in place, the sequence never leaves the
batch unless paused); `native+ngram` / `native+suffix` (the same with speculative decoding,
vLLM's defaults, `--suffix-config` JSON over suffix's: the same texts); `vllm-step`
(pipeline/vllm/engine.py as the pipeline runs it: one streamed completion per step, stopped at
the delimiter, the prefix resubmitted for the next step and after every backtrack, served from
vLLM's prefix cache); `vllm-stream` (the same backend with one stream per sequence, cut only by
a backtrack). The vLLM server starts once (its start-up is reported apart); its model threads
are `--vllm-threads` (default 1: its API server process and our client need the other core), the
native engine's `--threads`. The sides run interleaved for `--rounds` rounds (a load spike on
this shared machine hits every side alike) and each side's median round is reported. Figures:
problems/s and generated tokens/s (kept + discarded; the work done), p50/p95 latency,
backtracks, accuracy; ratios native / vllm-step. Also the cost of decode-side recompute on vLLM:
a prompt's first token cold vs on a prefix-cache hit.
The last line printed is one JSON object.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import time
from pathlib import Path

from pipeline.config import EngineConfig, PipelineConfig, SpeculativeConfig
from pipeline.engine import Engine, SamplingParams
from pipeline.evals import tasks
from pipeline.evals.problems import format_prompt
from pipeline.evals.runner import prompts_for
from pipeline.evals.verified import generate_verified
from pipeline.formats import format_for
from pipeline.models.resolve import resolve_model
from pipeline.schema import JobParams
from pipeline.verify.local import LocalVerifier
from pipeline.vllm.engine import VLLMEngine
from pipeline.vllm.server import VLLMServer, VLLMServerConfig

MAX_NUM_SEQS = 64


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))]


def run_side(engine, name: str, problems, args, verifier) -> dict:
    # As `stepwise eval` sends them, for this model's tokenizer and format.
    prompts = prompts_for(problems, engine.tokenizer, args.format)
    pipeline = PipelineConfig(max_retries=4, max_backtracks=8)
    params = [
        JobParams(temperature=0.7, max_tokens=args.max_tokens, seed=args.seed * 1000 + i,
                  verify=args.verify)
        for i in range(len(problems))
    ]  # fmt: skip
    stats: dict = {}
    subs = (getattr(engine, "num_submissions", 0), getattr(engine, "num_resubmitted_tokens", 0))
    t0 = time.perf_counter()
    comps = generate_verified(
        engine,
        prompts,
        [tuple(p.premises) for p in problems],
        params,
        verifier,
        stats=stats,
        questions=[p.question for p in problems],
        pipeline=pipeline,
    )
    wall = time.perf_counter() - t0
    lat = stats["finish_s"]
    generated = sum(c.num_tokens for c in comps)  # kept + discarded + probe tokens
    correct = sum(
        tasks.score(p, c.text, args.format)[1] >= 1.0 for p, c in zip(problems, comps, strict=True)
    )
    out = {
        "side": name,
        "wall_s": round(wall, 3),
        "problems_per_s": round(len(problems) / wall, 3),
        "generated_tok_per_s": round(generated / wall, 1),
        "generated_tokens": generated,
        "wasted_tokens": sum(c.wasted_tokens for c in comps),
        "backtracks": sum(c.backtracks for c in comps),
        "checks": sum(c.checks for c in comps),
        "p50_latency_s": round(pct(lat, 0.5), 3),
        "p95_latency_s": round(pct(lat, 0.95), 3),
        "accuracy": round(correct / len(problems), 3),
        "texts": hashlib.sha256("\x00".join(c.text for c in comps).encode()).hexdigest()[:16],
    }
    if isinstance(engine, VLLMEngine):  # this run's requests to vLLM, and prompt tokens resent
        out["submissions"] = engine.num_submissions - subs[0]
        out["resubmitted_prompt_tokens"] = engine.num_resubmitted_tokens - subs[1]
    return out


def recompute_cost(engine: VLLMEngine, problems, repeats: int = 3) -> dict:
    """First-token time of each prompt on vLLM: cold, then again (a prefix-cache hit): what
    decode pays to re-prefill a prompt prefill already ran on the same server."""
    cold, warm = [], []
    for i, p in enumerate(problems[:8]):
        # A unique prefix per prompt and run, so the cold run is really cold.
        ids = engine.encode_prompt(f"[{time.monotonic_ns()}:{i}] " + format_prompt(p) * 4)
        for bucket in (cold, *([warm] * repeats)):
            t0 = time.perf_counter()
            engine.generate([ids], SamplingParams(temperature=0.0, max_tokens=1))
            bucket.append(time.perf_counter() - t0)
    n = len(engine.encode_prompt(format_prompt(problems[0]) * 4))
    return {
        "prompt_tokens": n,
        "cold_ms": round(1000 * sum(cold) / len(cold), 1),
        "prefix_hit_ms": round(1000 * sum(warm) / len(warm), 1),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="tiny-reasoner", help="a model name or directory")
    ap.add_argument("--tasks", default="", help="default: indist (tiny reasoner), else broad")
    ap.add_argument("--n", type=int, default=128)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--verify", default="async", choices=["async", "strict", "off"])
    ap.add_argument("--max-tokens", type=int, default=256)
    ap.add_argument("--sides", default="native,vllm-step,vllm-stream")
    ap.add_argument("--rounds", type=int, default=3, help="sides interleaved, medians reported")
    ap.add_argument("--threads", type=int, default=2, help="the native engine's torch threads")
    ap.add_argument(
        "--vllm-threads",
        type=int,
        default=1,
        help="the vLLM server's OMP threads (its API server process and our HTTP client need "
        "a core too: on 2 cores, 2 threads ran 2-3x slower than 1)",
    )
    ap.add_argument("--vllm-url", default=os.environ.get("STEPWISE_VLLM_URL", ""))
    ap.add_argument("--suffix-config", default="{}", help="JSON over suffix's vLLM defaults")
    ap.add_argument(
        "--vllm-speculative-config",
        default="",
        help="vLLM's own --speculative-config for the vllm sides (e.g. its ngram), where its "
        "CPU build supports it",
    )
    ap.add_argument("--json-out", default=None)
    args = ap.parse_args()
    sides = args.sides.split(",")
    model = str(resolve_model(args.model))
    args.format = format_for(Path(model))
    task = args.tasks or ("indist" if args.format.name == "tiny" else "broad")
    problems = tasks.load_problems(task, args.n, args.seed)
    config = EngineConfig(model=model, dtype="float32", max_num_seqs=MAX_NUM_SEQS)
    print(f"load before: {os.getloadavg()[0]:.2f} (cores: {os.cpu_count()})")

    server, startup_s, url = None, 0.0, args.vllm_url
    if any(s.startswith("vllm") for s in sides) and not url:
        # Room for a chat prompt and the whole budget, rollbacks' resubmissions included.
        max_len = max(512, args.max_tokens + 512)
        spec_args = ("--speculative-config", args.vllm_speculative_config)
        server_config = VLLMServerConfig(
            model, max_num_seqs=MAX_NUM_SEQS, max_model_len=max_len,
            num_threads=args.vllm_threads,
            extra_args=spec_args if args.vllm_speculative_config else (),
        )  # fmt: skip
        server = VLLMServer(server_config).start()
        url, startup_s = server.url, server.startup_s
        print(f"vLLM server up in {startup_s:.1f} s at {url}")
    verifier = LocalVerifier() if args.verify != "off" else None
    engines: dict = {}
    runs: dict[str, list[dict]] = {side: [] for side in sides}
    extra: dict = {}
    try:
        for side in sides:
            if side.startswith("native"):
                method = side.partition("+")[2]
                extra_fields = json.loads(args.suffix_config) if method == "suffix" else {}
                spec = SpeculativeConfig(method=method, **extra_fields) if method else None
                engines[side] = Engine(
                    EngineConfig(
                        **{**_fields(config), "num_threads": args.threads, "speculative": spec}
                    )
                )
            else:
                engines[side] = VLLMEngine(config, url=url, step_stops=side == "vllm-step")
            # Warm-up: a few problems first (allocations, the checker's first solves).
            run_side(engines[side], side, problems[:4], args, verifier)
        for i in range(args.rounds):  # interleaved: a load spike hits every side alike
            for side in sides:
                load = os.getloadavg()[0]
                r = run_side(engines[side], side, problems, args, verifier)
                r["round"], r["load"] = i, round(load, 2)
                runs[side].append(r)
                print(json.dumps(r))
        if "vllm-step" in engines:
            extra["vllm_recompute"] = recompute_cost(engines["vllm-step"], problems)
            print("vLLM decode-side recompute:", json.dumps(extra["vllm_recompute"]))
    finally:
        for engine in engines.values():
            engine.close()
        if verifier is not None:
            verifier.close()
        if server is not None:
            server.stop()

    print(f"load after: {os.getloadavg()[0]:.2f}")
    results = {side: median_run(rs) for side, rs in runs.items()}
    head = f"{'side':<12}{'problems/s':>11}{'gen tok/s':>10}{'p50 s':>8}{'p95 s':>8}"
    print(f"medians of {args.rounds} interleaved rounds, {args.n} problems each")
    print(head + f"{'backtracks':>11}{'wasted':>8}{'acc':>7}")
    for r in results.values():
        print(
            f"{r['side']:<12}{r['problems_per_s']:>11.3f}{r['generated_tok_per_s']:>10.1f}"
            f"{r['p50_latency_s']:>8.2f}{r['p95_latency_s']:>8.2f}{r['backtracks']:>11}"
            f"{r['wasted_tokens']:>8}{r['accuracy']:>7.2f}"
        )
    summary = {"bench": "stepwise_vs_vllm", "model": args.model, "tasks": task, "n": args.n}
    summary.update(verify=args.verify, max_tokens=args.max_tokens, **extra)
    summary["vllm_speculative_config"] = args.vllm_speculative_config or None
    summary["rounds"], summary["threads"] = args.rounds, args.threads
    summary["vllm_threads"] = args.vllm_threads
    summary["vllm_startup_s"] = round(startup_s, 1)
    if "native" in results and "vllm-step" in results:
        nat, vs = results["native"], results["vllm-step"]
        summary["ratio_throughput"] = round(nat["problems_per_s"] / vs["problems_per_s"], 2)
        summary["ratio_tok_per_s"] = round(
            nat["generated_tok_per_s"] / vs["generated_tok_per_s"], 2
        )
        summary["ratio_p95"] = round(vs["p95_latency_s"] / nat["p95_latency_s"], 2)
        print(
            f"native vs vllm-step: {summary['ratio_throughput']}x problems/s, "
            f"{summary['ratio_tok_per_s']}x generated tok/s, p95 {summary['ratio_p95']}x lower"
        )
    for side in [s for s in results if s.startswith("native+")]:
        spec, base = results[side], results.get("native")
        if "vllm-step" in results:
            ratio = spec["problems_per_s"] / results["vllm-step"]["problems_per_s"]
            summary[f"ratio_throughput_{side}"] = round(ratio, 2)
            print(f"{side} vs vllm-step: {ratio:.2f}x problems/s")
        if base is not None:  # speculation changes no token: the same texts, run by run
            same = sum(
                a["texts"] == b["texts"] for a, b in zip(runs["native"], runs[side], strict=True)
            )
            summary[f"{side}_same_texts_rounds"] = same
            summary[f"{side}_vs_native_problems_per_s"] = round(
                spec["problems_per_s"] / base["problems_per_s"], 2
            )
            print(
                f"{side} vs native: {summary[f'{side}_vs_native_problems_per_s']}x problems/s, "
                f"p50 {base['p50_latency_s']:.2f} -> {spec['p50_latency_s']:.2f} s, same texts in "
                f"{same} of {len(runs[side])} rounds"
            )
    summary["sides"] = results
    summary["runs"] = runs
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(summary, indent=2) + "\n")
    print(json.dumps({k: v for k, v in summary.items() if k != "runs"}))


def median_run(runs: list[dict]) -> dict:
    """The run with the median throughput (its own latencies and counts, not a mix)."""
    ordered = sorted(runs, key=lambda r: r["problems_per_s"])
    return ordered[len(ordered) // 2]


def _fields(config: EngineConfig) -> dict:
    return {f: getattr(config, f) for f in config.__dataclass_fields__}


if __name__ == "__main__":  # the checker runs in spawned processes: the guard is required
    main()
