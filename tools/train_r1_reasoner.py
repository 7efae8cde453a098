"""Teach SmolLM2-135M-Instruct to think R1-style: a LoRA fine-tune on generated traces (CPU).

    # measure tokens/s first, then size the run from it (issue 21: <= 90 min on 2 cores)
    OMP_NUM_THREADS=2 python tools/train_r1_reasoner.py --measure
    OMP_NUM_THREADS=2 python tools/train_r1_reasoner.py --steps 1500 --out pipeline/assets/r1-lora
    # stopped? go on from the last checkpoint (the same adapter as a run that never stopped)
    OMP_NUM_THREADS=2 python tools/train_r1_reasoner.py --steps 1500 --resume

The base (`stepwise models prepare smollm2`) stays frozen; LoRA adapters on the attention
projections learn the traces of `pipeline/evals/r1_style.py`: `<think>`, prose reasoning with
the arithmetic inline, self-checks, thinking past the answer (`--post-answer`, the share of
traces that keep going), `</think>`, `The answer is \\boxed{N}.` The problems come from the task
generators' training split (seeds >= TRAIN_SEED_BASE, never a held-out question text). The loss
covers the completion only. The schedule is by step count (warm-up, cosine to 10%), the batch
of step k is a pure function of (--seed, k), and a checkpoint (adapter, optimizer, step) is
written every --save-every steps: a stopped run goes on from its last checkpoint with
`--resume` and ends with the same adapter as one that never stopped.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import random
import sys
import time
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from pipeline.evals.generators import make_problem  # noqa: E402
from pipeline.evals.problems import TRAIN_SEED_BASE, split_of  # noqa: E402
from pipeline.models.r1_template import R1_CHAT_TEMPLATE  # noqa: E402
from tools.lora import TARGETS, adapter_state, add_lora  # noqa: E402
from tools.r1_style import r1_trace  # noqa: E402
from tools.r1_tool_traces import ToolExample, prompt_ids, tool_example  # noqa: E402

# The broader curriculum (pipeline/evals/curriculum.py beside the tiny reasoner's families).
MIX = (("arith", 0.15), ("product", 0.15), ("signed", 0.12), ("linear", 0.14),
       ("system", 0.12), ("word", 0.14), ("story", 0.18))  # fmt: skip
DATA_SEED = TRAIN_SEED_BASE + 21  # this model's training problems (the tiny reasoner's: +0, +1)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--base", default=None, help="base model dir (default: prepared smollm2)")
    p.add_argument("--out", default=str(ROOT / "pipeline/assets/r1-lora"))
    p.add_argument("--steps", type=int, default=1500)  # ~85 min at ~210 tokens/s, 2 cores
    p.add_argument("--batch-size", type=int, default=4)
    p.add_argument("--max-len", type=int, default=384, help="tokens per example (prompt too)")
    p.add_argument("--rank", type=int, default=8)  # 3.7 MB of adapter: shipped in the repo
    p.add_argument("--alpha", type=float, default=16.0)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--warmup", type=int, default=50)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--level", default="standard", help="difficulty mix of the problems")
    p.add_argument("--post-answer", type=float, default=0.6, help="share thinking past the answer")
    p.add_argument("--save-every", type=int, default=50)
    p.add_argument("--resume", action="store_true", help="go on from --out/checkpoint.pt")
    p.add_argument("--measure", action="store_true", help="time 5 steps, print tokens/s, exit")
    p.add_argument(
        "--stop-after", type=int, default=0, help="stop after this many steps this run (a test)"
    )
    p.add_argument("--threads", type=int, default=None)
    p.add_argument(
        "--tool-share", type=float, default=0.0,
        help="share of examples that are tool-use traces (tools/r1_tool_traces.py)",
    )  # fmt: skip
    p.add_argument("--tool-max-len", type=int, default=768, help="tokens per tool example")
    p.add_argument(
        "--init-adapter", default=None,
        help="start from this adapter (a second phase: fresh optimizer and schedule)",
    )  # fmt: skip
    return p.parse_args(argv)


def example(tok, step: int, i: int, args) -> tuple[list[int], list[int]]:
    """(token ids, labels) of the i-th example of `step`: a pure function of its arguments."""
    rng = random.Random(f"{args.seed}:{step}:{i}")
    if args.tool_share and rng.random() < args.tool_share:
        return tool_ids(tok, tool_example(args.seed, rng.randrange(10**9)), args.tool_max_len)
    family = rng.choices([f for f, _ in MIX], [w for _, w in MIX])[0]
    index = rng.randrange(10**9)
    p = make_problem(family, DATA_SEED + args.seed, index, level=args.level)
    while split_of(p.question) != "train":  # never a held-out question text
        index += 1
        p = make_problem(family, DATA_SEED + args.seed, index, level=args.level)
    trace = r1_trace(p, seed=index, post_answer=args.post_answer)
    messages = [{"role": "user", "content": " ".join(p.question.split())}]
    prompt = tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    prompt_tokens = tok.encode(prompt, add_special_tokens=False)
    completion = tok.encode(trace.text, add_special_tokens=False) + [tok.eos_token_id]
    ids = (prompt_tokens + completion)[: args.max_len]
    labels = ([-100] * len(prompt_tokens) + completion)[: args.max_len]
    return ids, labels


def tool_ids(tok, ex: ToolExample, max_len: int) -> tuple[list[int], list[int]]:
    """A tool example's (token ids, labels), rendered by the R1-style reasoner's template
    (SmolLM2's renders no tools); the loss on the assistant's completion only."""
    prompt = prompt_ids(tok, ex, R1_CHAT_TEMPLATE)
    completion = tok.encode(ex.completion, add_special_tokens=False) + [tok.eos_token_id]
    return (prompt + completion)[:max_len], ([-100] * len(prompt) + completion)[:max_len]


def batch(tok, step: int, args) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, int]:
    rows = [example(tok, step, i, args) for i in range(args.batch_size)]
    width = max(len(ids) for ids, _ in rows)
    pad = tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id
    ids = torch.full((len(rows), width), pad)
    labels = torch.full((len(rows), width), -100)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for r, (x, y) in enumerate(rows):
        ids[r, : len(x)], labels[r, : len(y)], mask[r, : len(x)] = (
            torch.tensor(x),
            torch.tensor(y),
            1,
        )
    return ids, labels, mask, int(mask.sum())


def lr_at(step: int, args) -> float:
    if step < args.warmup:
        return args.lr * (step + 1) / args.warmup
    t = (step - args.warmup) / max(1, args.steps - args.warmup)
    return args.lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(1.0, t))))


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from pipeline.models.resolve import resolve_model

    if args.threads:
        torch.set_num_threads(args.threads)
    base = Path(args.base) if args.base else resolve_model("smollm2")
    torch.manual_seed(args.seed)
    tok = AutoTokenizer.from_pretrained(str(base))
    model = AutoModelForCausalLM.from_pretrained(str(base), dtype=torch.float32)
    layers = add_lora(model, args.rank, args.alpha, TARGETS)
    args.first_phase = None
    if args.init_adapter:  # a second phase starts from the first's adapter
        first_config = Path(args.init_adapter) / "adapter_config.json"
        args.first_phase = json.loads(first_config.read_text())
        first = load_file(str(Path(args.init_adapter) / "adapter.safetensors"))
        missing = set(first) - set(adapter_state(model))
        if missing:
            raise SystemExit(f"--init-adapter does not fit this model: {sorted(missing)[:3]}")
        model.load_state_dict(first, strict=False)
    model.train()
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=args.lr, weight_decay=0.0)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    start = 0
    ckpt = out / "checkpoint.pt"
    if args.resume and ckpt.is_file():
        state = torch.load(ckpt, weights_only=True)
        model.load_state_dict(state["adapter"], strict=False)
        opt.load_state_dict(state["optim"])
        start = int(state["step"])
        print(f"resumed at step {start}", file=sys.stderr)
    log_path = out / "train_log.csv"
    log = log_path.open("a", newline="")
    writer = csv.writer(log)
    if start == 0:
        log.truncate(0)
        writer.writerow(["step", "loss", "lr", "tokens", "seconds"])
    steps = 5 if args.measure else args.steps
    stop = min(steps, start + args.stop_after) if args.stop_after else steps
    t0, tokens = time.perf_counter(), 0
    for step in range(start, stop):
        ids, labels, mask, n = batch(tok, step, args)
        for g in opt.param_groups:
            g["lr"] = lr_at(step, args)
        loss = model(input_ids=ids, attention_mask=mask, labels=labels).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        tokens += n
        elapsed = time.perf_counter() - t0
        writer.writerow(
            [step, f"{loss.item():.4f}", f"{lr_at(step, args):.2e}", n, f"{elapsed:.1f}"]
        )
        if step % 10 == 0:
            print(
                f"step {step} loss {loss.item():.3f} {tokens / elapsed:.0f} tok/s", file=sys.stderr
            )
            log.flush()
        if not args.measure and ((step + 1) % args.save_every == 0 or step + 1 == stop):
            save(model, opt, step + 1, out, args, layers)
    log.close()
    rate = tokens / max(time.perf_counter() - t0, 1e-9)
    print(json.dumps({"tool": "train_r1_reasoner", "tokens_per_s": rate, "steps": stop - start}))
    return 0


def save(model, opt, step: int, out: Path, args, layers: list[str]) -> None:
    adapter = adapter_state(model)
    tmp = out / "checkpoint.pt.tmp"
    torch.save({"adapter": adapter, "optim": opt.state_dict(), "step": step}, tmp)
    tmp.replace(out / "checkpoint.pt")  # a stop mid-write never leaves a torn checkpoint
    save_file({k: v.contiguous() for k, v in adapter.items()}, str(out / "adapter.safetensors"))
    config = {"rank": args.rank, "alpha": args.alpha, "targets": list(TARGETS), "step": step,
              "layers": len(layers), "seed": args.seed, "post_answer": args.post_answer,
              "level": args.level, "base": "smollm2-135m-instruct",
              "tool_share": args.tool_share, "init_adapter": args.init_adapter,
              "first_phase": args.first_phase}  # fmt: skip
    (out / "adapter_config.json").write_text(json.dumps(config, indent=2) + "\n")


if __name__ == "__main__":
    raise SystemExit(main())
