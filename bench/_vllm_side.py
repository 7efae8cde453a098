"""vLLM side of bench/engine_throughput.py; runs under .venv-vllm/bin/python.

Reads a JSON job (model dir, dtype, requests as token ids + output lengths) from argv[1],
writes a JSON result to argv[2]: per-request output token ids, generation wall time (after a
warm-up; start-up is timed separately and not counted) and what vLLM chose for threads.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path


def main() -> None:
    job = json.loads(Path(sys.argv[1]).read_text())
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "2")
    os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", "auto")

    from vllm import LLM, SamplingParams
    from vllm.inputs import TokensPrompt

    t0 = time.perf_counter()
    llm = LLM(
        model=job["model"],
        dtype=job["dtype"],
        enforce_eager=True,
        # block_size=16 is rejected by the CPU attention backend (needs a multiple of 32).
        max_num_seqs=job.get("max_num_seqs", 64),
        max_num_batched_tokens=job.get("max_num_batched_tokens", 2048),
        max_model_len=job.get("max_model_len", 1024),
        skip_tokenizer_init=True,  # token ids in, token ids out
        seed=0,
    )
    startup_s = time.perf_counter() - t0

    def params(n: int) -> SamplingParams:
        return SamplingParams(max_tokens=n, ignore_eos=True, temperature=0.0, detokenize=False)

    prompts = [TokensPrompt(prompt_token_ids=r["prompt"]) for r in job["requests"]]
    out_lens = [r["out_len"] for r in job["requests"]]
    # Warm-up: the first batches pay one-off costs (allocations, kernel selection).
    warm = [TokensPrompt(prompt_token_ids=[100 + i] * (8 + 16 * i)) for i in range(4)]
    llm.generate(warm, [params(8)] * len(warm), use_tqdm=False)

    t1 = time.perf_counter()
    outs = llm.generate(prompts, [params(n) for n in out_lens], use_tqdm=False)
    wall_s = time.perf_counter() - t1

    result = {
        "startup_s": startup_s,
        "wall_s": wall_s,
        "token_ids": [list(o.outputs[0].token_ids) for o in outs],
        "threads_bind": os.environ.get("VLLM_CPU_OMP_THREADS_BIND"),
        "block_size": llm.llm_engine.vllm_config.cache_config.block_size,
    }
    Path(sys.argv[2]).write_text(json.dumps(result))


if __name__ == "__main__":  # vLLM spawns its engine core process: the guard is required
    main()
