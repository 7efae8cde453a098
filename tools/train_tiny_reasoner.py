"""Train the bundled tiny reasoner from scratch on CPU (seeded, time-budgeted).

The shipped model came from two phases (see its MODEL_CARD.md for the measured figures):

    # phase 1: format and copying, two-digit-heavy problems (stopped at step 2550, 20.5 min)
    OMP_NUM_THREADS=1 python tools/train_tiny_reasoner.py --level standard --seed 0 \
        --minutes 80 --max-steps 2550 --out pipeline/assets/tiny-reasoner
    # phase 2: arithmetic, mostly one-digit operands, from the phase-1 weights (60 min)
    OMP_NUM_THREADS=1 python tools/train_tiny_reasoner.py --level easy --seed 1 \
        --minutes 60 --init pipeline/assets/tiny-reasoner --out pipeline/assets/tiny-reasoner

A plain `LlamaForCausalLM` with character tokens learns the step format of
docs/step-format.md from an endless stream of generated problems (pipeline.evals.generators,
training split only: seeds >= TRAIN_SEED_BASE and never a held-out question text). The loss
covers the solution only. Short arithmetic drills are mixed in because arithmetic, not the
format, is what a model this small struggles with. The learning rate follows the wall-clock
budget (cosine to 10% of peak), and the model is saved into --out every --save-minutes, so the
directory always holds something shippable. Data order and initialization are seeded; because
the schedule follows the clock, a rerun on another machine takes a different number of steps
(`--max-steps` bounds it).
"""

from __future__ import annotations

import argparse
import csv
import math
import random
import shutil
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tools"))

from build_tiny_tokenizer import BOS_ID, EOS_ID, PAD_ID, write_tokenizer  # noqa: E402
from transformers import LlamaConfig, LlamaForCausalLM  # noqa: E402

from pipeline.evals.generators import DEFAULT_LEVEL, LEVELS, make_problem  # noqa: E402
from pipeline.evals.problems import TRAIN_SEED_BASE, format_prompt, split_of  # noqa: E402

DEFAULT_MIX = "arith:0.25,linear:0.2,system:0.13,word:0.17,drill:0.25"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--out", default=str(ROOT / "pipeline/assets/tiny-reasoner"))
    p.add_argument("--minutes", type=float, default=80.0, help="wall-clock training budget")
    p.add_argument("--max-steps", type=int, default=0, help="stop after this many steps (0: off)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--lr", type=float, default=2e-3)
    p.add_argument("--warmup", type=int, default=300)
    p.add_argument("--weight-decay", type=float, default=0.05)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--hidden", type=int, default=192)
    p.add_argument("--heads", type=int, default=6)
    p.add_argument("--intermediate", type=int, default=512)
    p.add_argument("--level", default=DEFAULT_LEVEL, choices=sorted(LEVELS), help="difficulty mix")
    p.add_argument("--init", metavar="DIR", help="start from this checkpoint (curriculum phase 2)")
    p.add_argument("--mix", default=DEFAULT_MIX, help="family:weight,... of the training stream")
    p.add_argument("--save-minutes", type=float, default=5.0)
    p.add_argument("--log-every", type=int, default=50)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument(
        "--no-bf16", action="store_true", help="train in fp32 (bf16 autocast is ~2x faster)"
    )
    p.add_argument("--mark-step", type=int, default=0, help="--plot: draw the phase boundary")
    p.add_argument("--ship-step", type=int, default=0, help="--plot: mark the shipped checkpoint")
    p.add_argument(
        "--plot",
        metavar="PNG",
        help="only plot OUT/train_log.csv (loss by step) into PNG and exit (needs matplotlib)",
    )
    return p.parse_args(argv)


def plot_curve(log_csv: Path, png: Path, mark_step: int = 0, ship_step: int = 0) -> None:
    """Training and validation loss by optimizer step (tools-only dependency: matplotlib)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = list(csv.DictReader(log_csv.open()))
    steps = [int(r["step"]) for r in rows]
    fig, ax = plt.subplots(figsize=(7, 4), dpi=110)
    ax.plot(steps, [float(r["train_loss"]) for r in rows], lw=1, label="train (mean over 50 steps)")
    val = [(int(r["step"]), float(r["val_loss"])) for r in rows if r["val_loss"]]
    ax.plot(
        *zip(*val, strict=True),
        "o-",
        ms=3,
        label="held-out (seed 999999, 256 problems, the phase's level)",
    )
    if mark_step:
        ax.axvline(mark_step, color="gray", ls="--", lw=1, label=f"phase 2 from step {mark_step}")
    if ship_step:
        ax.axvline(ship_step, color="green", ls=":", lw=1.5, label=f"shipped: step {ship_step}")
    ax.set_yscale("log")
    ax.set_xlabel("optimizer step (batch 16)")
    ax.set_ylabel("loss per solution token (nats)")
    minutes = float(rows[-1]["elapsed_s"]) / 60
    ax.set_title(f"tiny reasoner: {steps[-1]} steps, {minutes:.0f} min on one CPU thread")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(png)


class Stream:
    """Endless, seeded stream of training examples (input_ids, labels), bucketed by length."""

    def __init__(self, tok, mix: dict[str, float], seed: int, batch_size: int, level: str) -> None:
        self.tok = tok
        self.families, self.weights = zip(*mix.items(), strict=True)
        self.rng = random.Random(seed)
        self.seed = TRAIN_SEED_BASE + seed
        self.index = 0
        self.batch_size = batch_size
        self.level = level
        self.skipped = 0

    def example(self) -> tuple[list[int], list[int]]:
        while True:
            family = self.rng.choices(self.families, self.weights)[0]
            p = make_problem(family, self.seed, self.index, level=self.level)
            self.index += 1
            if split_of(p.question) == "train":
                break
            self.skipped += 1
        prompt = self.tok.encode(format_prompt(p)).ids  # [<s>, ...]
        if self.rng.random() < 0.1:  # also serve callers that do not add <s>
            prompt = prompt[1:]
        answer = self.tok.encode(p.solution, add_special_tokens=False).ids + [EOS_ID]
        return prompt + answer, [-100] * len(prompt) + answer

    def batches(self, pool_batches: int = 32):
        while True:
            pool = [self.example() for _ in range(self.batch_size * pool_batches)]
            pool.sort(key=lambda e: len(e[0]))
            chunks = [pool[i : i + self.batch_size] for i in range(0, len(pool), self.batch_size)]
            self.rng.shuffle(chunks)
            for chunk in chunks:
                yield collate(chunk)


def collate(chunk: list[tuple[list[int], list[int]]]) -> dict[str, torch.Tensor]:
    width = max(len(ids) for ids, _ in chunk)
    ids = torch.full((len(chunk), width), PAD_ID, dtype=torch.long)
    labels = torch.full((len(chunk), width), -100, dtype=torch.long)
    mask = torch.zeros((len(chunk), width), dtype=torch.long)
    for row, (x, y) in enumerate(chunk):
        ids[row, : len(x)] = torch.tensor(x)
        labels[row, : len(y)] = torch.tensor(y)
        mask[row, : len(x)] = 1
    return {"input_ids": ids, "labels": labels, "attention_mask": mask}


def val_batches(
    tok, level: str, n: int = 256, batch_size: int = 32
) -> list[dict[str, torch.Tensor]]:
    """A fixed held-out set (seed 999_999, test split) for the validation loss."""
    from pipeline.evals.generators import EVAL_FAMILIES, generate

    per = n // len(EVAL_FAMILIES)
    problems = [
        p for f in EVAL_FAMILIES for p in generate(f, per, seed=999_999, split="test", level=level)
    ]
    examples = []
    for p in problems:
        prompt = tok.encode(format_prompt(p)).ids
        answer = tok.encode(p.solution, add_special_tokens=False).ids + [EOS_ID]
        examples.append((prompt + answer, [-100] * len(prompt) + answer))
    examples.sort(key=lambda e: len(e[0]))
    return [collate(examples[i : i + batch_size]) for i in range(0, len(examples), batch_size)]


@torch.no_grad()
def val_loss(model, batches, bf16: bool) -> float:
    model.eval()
    total, count = 0.0, 0
    for b in batches:
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            loss = model(**b).loss
        n = int((b["labels"][:, 1:] != -100).sum())
        total, count = total + float(loss) * n, count + n
    model.train()
    return total / count


def save(model, out: Path) -> None:
    """Write the weights next to the tokenizer; through a temp dir so a reader never sees half."""
    tmp = out.with_name(out.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    model.save_pretrained(tmp, safe_serialization=True)
    for name in ("config.json", "generation_config.json", "model.safetensors"):
        if (tmp / name).exists():
            (tmp / name).replace(out / name)
    shutil.rmtree(tmp, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.plot:
        plot_curve(
            Path(args.out) / "train_log.csv", Path(args.plot), args.mark_step, args.ship_step
        )
        return 0
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    random.seed(args.seed)
    out = Path(args.out)
    tok = write_tokenizer(out)
    mix = {k: float(v) for k, v in (item.split(":") for item in args.mix.split(","))}
    bf16 = not args.no_bf16

    config = LlamaConfig(
        vocab_size=tok.get_vocab_size(),
        hidden_size=args.hidden,
        intermediate_size=args.intermediate,
        num_hidden_layers=args.layers,
        num_attention_heads=args.heads,
        num_key_value_heads=args.heads,
        max_position_embeddings=512,
        rope_theta=10000.0,
        rms_norm_eps=1e-5,
        tie_word_embeddings=True,
        bos_token_id=BOS_ID,
        eos_token_id=EOS_ID,
        pad_token_id=PAD_ID,
        initializer_range=0.02,
    )
    if args.init:  # a later curriculum phase: same architecture, weights from phase 1
        model = LlamaForCausalLM.from_pretrained(args.init, dtype=torch.float32)
    else:
        model = LlamaForCausalLM(config)
    model.generation_config.pad_token_id = PAD_ID
    n_params = sum(p.numel() for p in model.parameters())
    print(f"params: {n_params / 1e6:.2f} M  config: {args}", flush=True)

    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.dim() < 2]
    opt = torch.optim.AdamW(
        [
            {"params": decay, "weight_decay": args.weight_decay},
            {"params": no_decay, "weight_decay": 0},
        ],
        lr=args.lr,
        betas=(0.9, 0.98),
    )
    stream = Stream(tok, mix, args.seed, args.batch_size, args.level)
    val = val_batches(tok, args.level)
    log_path = out / "train_log.csv"
    # A later phase (--init) continues the earlier phase's log: steps, time and tokens add up.
    step0, elapsed0, tokens0 = 0, 0.0, 0
    if args.init and log_path.exists():
        last = list(csv.DictReader(log_path.open()))[-1]
        step0, elapsed0, tokens0 = int(last["step"]), float(last["elapsed_s"]), int(last["tokens"])
        log_file = log_path.open("a", newline="")
        log = csv.writer(log_file)
        print(f"continuing {log_path} after step {step0}", flush=True)
    else:
        log_file = log_path.open("w", newline="")
        log = csv.writer(log_file)
        log.writerow(["step", "elapsed_s", "tokens", "lr", "train_loss", "val_loss"])

    budget_s = args.minutes * 60
    start = last_save = time.monotonic()
    step, tokens, run_loss, run_n = 0, 0, 0.0, 0
    model.train()
    for batch in stream.batches():
        elapsed = time.monotonic() - start
        frac = min(elapsed / budget_s, 1.0)
        lr = (
            args.lr
            * (min(1.0, (step + 1) / args.warmup))
            * (0.1 + 0.45 * (1 + math.cos(math.pi * frac)))
        )
        for g in opt.param_groups:
            g["lr"] = lr
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            loss = model(**batch).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        step += 1
        tokens += int(batch["attention_mask"].sum())
        run_loss, run_n = run_loss + loss.item(), run_n + 1
        done = elapsed >= budget_s or (args.max_steps and step >= args.max_steps)
        if step % args.log_every == 0 or done:
            save_now = done or time.monotonic() - last_save >= args.save_minutes * 60
            vl = val_loss(model, val, bf16) if save_now else ""
            log.writerow(
                [
                    step0 + step,
                    round(elapsed0 + elapsed, 1),
                    tokens0 + tokens,
                    f"{lr:.3e}",
                    f"{run_loss / run_n:.4f}",
                    vl and f"{vl:.4f}",
                ]
            )
            log_file.flush()
            print(
                f"step {step} t={elapsed:.0f}s tok={tokens} lr={lr:.2e} loss={run_loss / run_n:.4f}"
                + (f" val={vl:.4f}" if vl != "" else ""),
                flush=True,
            )
            run_loss, run_n = 0.0, 0
            if save_now:
                save(model, out)
                last_save = time.monotonic()
                print(f"saved {out} at step {step}", flush=True)
        if done:
            break
    log_file.close()
    print(
        f"done: {step} steps, {tokens} tokens, {time.monotonic() - start:.0f}s, "
        f"skipped {stream.skipped} held-out questions"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
