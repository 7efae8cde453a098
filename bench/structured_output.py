"""Structured output's cost and correctness on a real model, side by side in one run.

    python bench/structured_output.py [--model smollm2] [--schemas 50] [--runs 5]
        [--batch 8] [--tokens 96] [--seed 0]
    python bench/structured_output.py --model r1-reasoner --thinking 160 --runs 0

Correctness: `--schemas` generated JSON schemas (objects of enums, bounded integers and numbers,
booleans, short strings, short arrays, nested objects; seeded), each answered by the model with
the grammar from the first token, or (`--thinking N`, a model that thinks) after its thinking,
which runs free and is closed after N tokens by appending `</think>` if the model has not closed
it itself (budget forcing's handover); every answer must parse and validate (jsonschema).

Cost: the same batch of prompts decoded greedily with and without a grammar (`{"type":
"array", "items": {"type": "integer"}}`), EOS ignored, so both sides generate exactly
`--tokens` tokens per request (should the list close early, the grammar allows only EOS, which
is ignored, and the guide stops masking); tokens/s per side, interleaved runs, medians and
spread, the ratio (issue 38's target: >= 0.9x).
The last line printed is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import jsonschema  # noqa: E402

from pipeline.engine import Engine, EngineConfig, Request, SamplingParams  # noqa: E402
from pipeline.engine.grammar import GuidedDecoding, compile_grammar  # noqa: E402
from pipeline.models.resolve import resolve_model  # noqa: E402

END = "</think>"
WORDS = ["red", "green", "blue", "north", "south", "alpha", "beta", "gamma", "yes", "no"]


def leaf(rng: random.Random) -> dict:
    kind = rng.choice(["enum", "integer", "number", "boolean", "string", "array"])
    if kind == "enum":
        return {"enum": rng.sample(WORDS, rng.randint(2, 4))}
    if kind == "integer":
        lo = rng.randint(-50, 50)
        return {"type": "integer", "minimum": lo, "maximum": lo + rng.randint(1, 500)}
    if kind == "number":
        return {"type": "number", "minimum": 0, "maximum": 1000}
    if kind == "boolean":
        return {"type": "boolean"}
    if kind == "string":
        return {"type": "string", "maxLength": rng.randint(1, 12)}
    return {"type": "array", "items": {"type": "integer", "minimum": 0, "maximum": 99},
            "maxItems": rng.randint(1, 4)}  # fmt: skip


def make_schema(rng: random.Random, depth: int = 0) -> dict:
    props = {}
    for i in range(rng.randint(1, 4)):
        nested = depth < 1 and rng.random() < 0.2
        props[f"f{i}_{rng.choice(WORDS)}"] = make_schema(rng, depth + 1) if nested else leaf(rng)
    return {"type": "object", "properties": props, "required": list(props),
            "additionalProperties": False}  # fmt: skip


def answer(engine: Engine, prompt: list[int], guided: GuidedDecoding, seed: int,
           thinking: int) -> str:  # fmt: skip
    """The model's answer under the grammar. With `thinking`, the thinking runs free and is
    closed after that many tokens if the model has not closed it (budget forcing's handover:
    the end marker only); the answer is what follows the marker."""
    params = SamplingParams(temperature=0.7, seed=seed, max_tokens=400 + thinking, guided=guided)
    seq = engine.add(Request(f"s{seed}", prompt, params))
    forced = False
    while engine.has_unfinished():
        engine.step()
        guide = seq.guide
        opened = guide is not None and guide.active_at is not None
        if thinking and not opened and not forced and seq.num_output_tokens >= thinking:
            engine.append_tokens(seq.request_id, engine.tokenizer.encode(
                "\n" + END, add_special_tokens=False))  # fmt: skip
            forced = True
    text = engine.tokenizer.decode(seq.output_token_ids)
    return text.split(END, 1)[1] if thinking else text


def correctness(engine: Engine, prompt: list[int], n: int, seed: int, thinking: int) -> dict:
    rng = random.Random(seed)
    ok, failures, lengths = 0, [], []
    after = (END,) if thinking else ()
    for i in range(n):
        schema = make_schema(rng)
        guided = GuidedDecoding(compile_grammar("json", schema), after)
        text = answer(engine, prompt, guided, seed + i, thinking)
        lengths.append(len(text))
        try:
            jsonschema.validate(json.loads(text), schema)
            ok += 1
        except (json.JSONDecodeError, jsonschema.ValidationError) as exc:
            failures.append({"schema": schema, "text": text[:200], "why": str(exc)[:120]})
        print(f"  schema {i + 1}/{n}: {ok} valid so far", file=sys.stderr)
    return {"schemas": n, "valid": ok, "failures": failures[:5], "thinking": thinking,
            "median_chars": statistics.median(lengths)}  # fmt: skip


def timed(engine: Engine, prompts: list[list[int]], tokens: int, guided: bool) -> float:
    grammar = compile_grammar("json", {"type": "array", "items": {"type": "integer"}})
    spec = GuidedDecoding(grammar) if guided else None
    params = SamplingParams(temperature=0.0, max_tokens=tokens, ignore_eos=True, guided=spec)
    t0 = time.perf_counter()
    outs = engine.generate(prompts, params)
    dt = time.perf_counter() - t0
    return sum(len(o.token_ids) for o in outs) / dt


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="smollm2")
    ap.add_argument("--schemas", type=int, default=50)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--tokens", type=int, default=96)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=2)
    thinking = "a thinking model (r1-reasoner): close its thinking after N tokens"
    ap.add_argument("--thinking", type=int, default=0, help=thinking)
    args = ap.parse_args()
    engine = Engine(EngineConfig(model=str(resolve_model(args.model)), dtype="float32",
                                 num_threads=args.threads))  # fmt: skip
    tok = engine.tokenizer
    ask = "Answer as JSON: describe a city with a few fields."
    prompt = tok.apply_chat_template([{"role": "user", "content": ask}])
    result: dict = {"model": args.model}
    if args.schemas:
        result["correctness"] = correctness(engine, prompt, args.schemas, args.seed, args.thinking)
        c = result["correctness"]
        print(f"valid answers: {c['valid']}/{c['schemas']}")
    if args.runs:
        result["tokens_per_s"] = throughput(engine, args)
    print(json.dumps(result))


def throughput(engine: Engine, args: argparse.Namespace) -> dict:
    prompts = [engine.tokenizer.encode(f"List some numbers, case {i}:") for i in range(args.batch)]
    timed(engine, prompts, 8, True)  # warm: llguidance's tokenizer view, the kernels
    free, held = [], []
    for _ in range(args.runs):  # interleaved
        free.append(timed(engine, prompts, args.tokens, False))
        held.append(timed(engine, prompts, args.tokens, True))
    ratios = [h / f for h, f in zip(held, free, strict=True)]
    t = {
        "free": {"median": statistics.median(free), "min": min(free), "max": max(free)},
        "grammar": {"median": statistics.median(held), "min": min(held), "max": max(held)},
        "ratio_median": statistics.median(ratios), "ratio_min": min(ratios),
        "ratio_max": max(ratios),
    }  # fmt: skip
    print(f"tokens/s free {t['free']['median']:.1f}, with a grammar {t['grammar']['median']:.1f}"
          f": {t['ratio_median']:.3f}x (runs {min(ratios):.3f}-{max(ratios):.3f})")  # fmt: skip
    return t


if __name__ == "__main__":
    main()
