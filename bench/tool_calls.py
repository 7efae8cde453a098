"""The R1-style reasoner's tool use, before and after its tool-call training, side by side.

    python bench/tool_calls.py [--before git:REV | --before ADAPTER_DIR] [--n 40] [--seed 1000]

Both adapters are merged into SmolLM2 (in a temporary directory) and run on the same held-out
chats (tools/r1_tool_traces.py at seeds the training never drew; greedy, tools rendered by the
R1 template, `tool_choice: auto`: no grammar, the model decides):

* `call`: tools offered, a question one of them answers. Right call: the hermes parser finds
  exactly one call, with the right name and exactly the right arguments.
* `held-out tool`: the same with a tool the training never showed (`get_population`).
* `answer`: the call and the tool's result are in the chat; right: the answer after the thinking
  states the result's value (as the task writes it) and makes no call. A thinking never closed
  has no answer (and no call) here.
* `plain`: tools that do not fit an arithmetic problem; right: no call and the right `\\boxed`
  answer (how much of its reasoning the training kept).

`--before` defaults to the adapter in git before the tool training; `--after` to the repo's.
The last line printed is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from pipeline.engine import Engine, EngineConfig, SamplingParams  # noqa: E402
from pipeline.models.paths import R1_ADAPTER_DIR  # noqa: E402
from pipeline.models.prepare import prepare_r1_reasoner  # noqa: E402
from pipeline.toolcalls.registry import get_parser  # noqa: E402
from tools.r1_tool_traces import TOOLS, ToolExample, offered, prompt_ids, tool_example  # noqa: E402

BEFORE = "git:60befae"  # the last commit with the adapter trained on reasoning traces only
END = "</think>"
COUNTRIES = {"France": 68_170_000, "Japan": 124_500_000, "Kenya": 55_100_000,
             "Peru": 34_350_000, "Norway": 5_520_000, "Chile": 19_630_000,
             "Egypt": 112_700_000, "Canada": 40_100_000}  # fmt: skip
POPULATION = {
    "type": "function",
    "function": {
        "name": "get_population",
        "description": "Get the population of a country.",
        "parameters": {
            "type": "object",
            "properties": {"country": {"type": "string"}},
            "required": ["country"],
        },  # fmt: skip
    },
}


def held_out_tool(seed: int, index: int) -> tuple[ToolExample, dict]:
    """A chat whose question only a tool the training never showed answers."""
    rng = random.Random(f"held-out:{seed}:{index}")
    country = rng.choice(sorted(COUNTRIES))
    q = rng.choice(("How many people live in {c}?", "What is the population of {c}?"))
    tools = [*offered(rng, None)[:1], POPULATION]
    rng.shuffle(tools)
    messages = [{"role": "user", "content": q.format(c=country)}]
    return ToolExample("call", messages, tools, ""), {"country": country}


def adapter_dir(spec: str, tmp: Path, name: str) -> Path:
    """An adapter directory: as given, or `git:REV`'s copy of the repo's adapter."""
    if not spec.startswith("git:"):
        return Path(spec)
    rev, out = spec[4:], tmp / f"adapter-{name}"
    out.mkdir()
    rel = R1_ADAPTER_DIR.relative_to(ROOT)
    for file in ("adapter.safetensors", "adapter_config.json"):
        blob = subprocess.run(["git", "-C", str(ROOT), "show", f"{rev}:{rel / file}"],
                              check=True, capture_output=True).stdout  # fmt: skip
        (out / file).write_bytes(blob)
    return out


def score(kind: str, text: str, ex: ToolExample, expected: dict | None) -> dict:
    # What follows the thinking; a thinking never closed has no answer and makes no call.
    parsed = get_parser("hermes").extract(text.split(END, 1)[1] if END in text else "")
    calls = [(c.name, _json(c.arguments)) for c in parsed.calls]
    content = parsed.content or ""
    row = {"closed": END in text, "calls": len(calls)}
    if kind == "call":
        name = ex.task.tool if ex.task else "get_population"
        args = ex.task.arguments if ex.task else expected
        row["right_name"] = len(calls) == 1 and calls[0][0] == name
        row["right"] = row["right_name"] and calls[0][1] == args
    else:
        row["right"] = not calls and ex.gold in content
    return row


def _json(text: str):
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return None


def run(engine: Engine, sets: dict[str, list], max_tokens: int) -> dict:
    out = {}
    for kind, items in sets.items():
        prompts = [prompt_ids(engine.tokenizer.hf, ex) for ex, _ in items]
        params = SamplingParams(temperature=0.0, max_tokens=max_tokens)
        texts = [c.text for c in engine.generate(prompts, params)]
        rows = [score("call" if kind.startswith("call") else kind, t, ex, exp)
                for t, (ex, exp) in zip(texts, items, strict=True)]  # fmt: skip
        n = len(rows)
        out[kind] = {
            "n": n,
            "right": sum(r["right"] for r in rows) / n,
            "closed_thinking": sum(r["closed"] for r in rows) / n,
            "made_a_call": sum(r["calls"] > 0 for r in rows) / n,
            **(
                {"right_name": sum(r["right_name"] for r in rows) / n}
                if "right_name" in rows[0]
                else {}
            ),  # fmt: skip
            "example": texts[0][-300:],
        }
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--before", default=BEFORE, help="adapter dir, or git:REV (the repo's then)")
    ap.add_argument("--after", default=str(R1_ADAPTER_DIR), help="adapter dir, or git:REV")
    ap.add_argument("--n", type=int, default=40, help="chats per kind")
    ap.add_argument("--seed", type=int, default=1000, help="held-out seeds start here")
    ap.add_argument("--max-tokens", type=int, default=640)
    args = ap.parse_args()
    sets: dict[str, list] = {k: [] for k in ("call", "call_held_out_tool", "answer", "plain")}
    for i in range(args.n):
        for kind in ("call", "answer", "plain"):
            sets[kind].append((tool_example(args.seed, i, kind), None))
        sets["call_held_out_tool"].append(held_out_tool(args.seed, i))
    assert set(TOOLS).isdisjoint({"get_population"})
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        for side, spec in (("before", args.before), ("after", args.after)):
            adapter = adapter_dir(spec, Path(tmp), side)
            model = prepare_r1_reasoner(dest=Path(tmp) / f"model-{side}", adapter_dir=adapter)
            engine = Engine(EngineConfig(model=str(model), dtype="float32"))
            results[side] = run(engine, sets, args.max_tokens)
            del engine
            for kind, r in results[side].items():
                print(f"{side:6s} {kind:20s} right {r['right']:.1%}  calls {r['made_a_call']:.0%}"
                      f"  closed thinking {r['closed_thinking']:.0%}", file=sys.stderr)  # fmt: skip
    summary = {kind: {"before": results["before"][kind]["right"],
                      "after": results["after"][kind]["right"]} for kind in sets}  # fmt: skip
    print(json.dumps({"bench": "tool_calls", "n": args.n, "seed": args.seed, "summary": summary,
                      "before": args.before, "after": args.after, "results": results}))  # fmt: skip


if __name__ == "__main__":
    main()
