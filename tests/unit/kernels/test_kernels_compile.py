"""Every Triton kernel compiles for a real GPU target (sm_90, an H100/H200) with Triton's
own compiler and the ptxas it ships, on a machine without a GPU: catches what the
interpreter accepts but codegen rejects (types, shapes, control flow). Numerics are the
interpreter tests' and the `gpu` tests' job. The compiles run in a fresh process: this one
has Triton imported for its interpreter, which compiling cannot share.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]

# (module, kernel, pointer/float argument types, constexprs); other arguments are i32.
CASES = [
    (
        "paged_attention",
        "_split_kernel",
        {"q_ptr": "*bf16", "k_ptr": "*bf16", "v_ptr": "*bf16", "bt_ptr": "*i64",
         "ctx_ptr": "*i64", "out_ptr": "*bf16", "part_ptr": "*fp32", "lse_ptr": "*fp32",
         "scale": "fp32"},
        dict(GROUP=6, BLOCK_G=16, HEAD_DIM=128, BLOCK_D=128, BLOCK_N=64, SPLIT=True,
             PRECISION="tf32"),
    ),
    (
        "paged_attention",
        "_split_kernel",
        {"q_ptr": "*fp32", "k_ptr": "*fp32", "v_ptr": "*fp32", "bt_ptr": "*i32",
         "ctx_ptr": "*i32", "out_ptr": "*fp32", "part_ptr": "*fp32", "lse_ptr": "*fp32",
         "scale": "fp32"},
        dict(GROUP=1, BLOCK_G=16, HEAD_DIM=96, BLOCK_D=128, BLOCK_N=64, SPLIT=False,
             PRECISION="ieee"),
    ),
    (
        "paged_attention",
        "_reduce_kernel",
        {"part_ptr": "*fp32", "lse_ptr": "*fp32", "out_ptr": "*bf16"},
        dict(HEAD_DIM=128, BLOCK_D=128, BLOCK_S=8),
    ),
    (
        "kv_store",
        "_store_kernel",
        {"k_ptr": "*bf16", "v_ptr": "*bf16", "kc_ptr": "*bf16", "vc_ptr": "*bf16",
         "slot_ptr": "*i64"},
        dict(HEAD_DIM=128, BLOCK_H=2, BLOCK_D=128),
    ),
    (
        "logits_stats",
        "_stats_kernel",
        {"x_ptr": "*fp32", "argmax_ptr": "*i64", "maxp_ptr": "*fp32", "ent_ptr": "*fp32",
         "lse_ptr": "*fp32"},
        dict(BLOCK_V=4096),
    ),
    (
        "kv_transfer",
        "_copy_kernel",
        {"kv_ptr": "*bf16", "buf_ptr": "*bf16", "blocks_ptr": "*i64"},
        dict(HEAD_DIM=128, BLOCK_T=16, BLOCK_D=128, TO_BUF=True),
    ),
]  # fmt: skip


COMPILE = """
import importlib, inspect, json, sys
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

target = GPUTarget("cuda", 90, 32)
results = []
for module, kernel, types, constexprs in json.loads(sys.stdin.read()):
    fn = getattr(importlib.import_module(f"pipeline.kernels.{module}_triton"), kernel)
    names = list(inspect.signature(fn.fn).parameters)
    signature = {n: "constexpr" if n in constexprs else types.get(n, "i32") for n in names}
    consts = {(names.index(k),): v for k, v in constexprs.items()}
    try:
        compiled = triton.compile(ASTSource(fn, signature, consts), target=target)
        results.append(len(compiled.asm["cubin"]))
    except Exception as e:  # reported per case by the test
        results.append(f"{type(e).__name__}: {e}"[-3000:])
print(json.dumps(results))
"""


@pytest.fixture(scope="module")
def compiled(tmp_path_factory) -> list:
    pytest.importorskip("triton", reason="triton is a dev dependency")
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env.update(
        TRITON_CACHE_DIR=str(tmp_path_factory.mktemp("triton-cache")),  # compile, no cache hit
        TRITON_DEFAULT_FP_FUSION="1",
        PYTHONPATH=str(ROOT),
    )
    out = subprocess.run(
        [sys.executable, "-c", COMPILE],
        input=json.dumps(CASES),
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("case", range(len(CASES)), ids=lambda i: f"{CASES[i][1]}-{i}")
def test_kernel_compiles_for_sm90(compiled, case):
    result = compiled[case]
    assert isinstance(result, int) and result > 0, result
