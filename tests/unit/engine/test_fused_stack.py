"""The decoder stack in one C call (CausalLM.fuse_cpu_stack, kernels/decoder_cpu.py) computes
what the modules compute, bit for bit: hidden states and every layer's K/V cache, on every
batch the engine forms (prefill chunks, decodes, both at once, speculative verifying rows), in
fp32 and bf16; it stays off where it does not apply, and bad input raises as the kernels do."""

import pytest
import torch

from pipeline.config import SpeculativeConfig
from pipeline.engine import Engine, EngineConfig, SamplingParams
from pipeline.engine.attention import AttentionMetadata, DecodeGroup
from pipeline.kernels import cpu_linear, decoder_cpu, dispatch, linear_bf16_cpu
from pipeline.kernels.dispatch import KernelArgumentError
from tests.model_factory import VARIANTS

pytestmark = pytest.mark.skipif(
    not decoder_cpu.is_supported(torch.float32), reason="no C compiler: no C kernels here"
)
FUSED_FAMILIES = [f for f in VARIANTS if f != "qwen3"]  # qwen3's q/k norms keep the modules
PROMPTS = [[5 + (7 * i + j) % 250 for j in range(n)] for i, n in enumerate((1, 9, 23, 40))]


def engine(path, dtype="float32", **kw):
    cfg = dict(model=str(path), dtype=dtype, num_kv_blocks=64, block_size=8)
    return Engine(EngineConfig(**{**cfg, **kw}))


class BothWays:
    """Wraps the model's forward: each batch runs fused, then (caches restored) module by
    module; both must give the same hidden states and leave the same caches."""

    def __init__(self, model, monkeypatch):
        self.model, self.batches, self.fused_rows = model, 0, []
        self.forward = model.forward
        monkeypatch.setattr(model, "forward", self)

    def __call__(self, input_ids, positions, kv_caches, meta):
        m = self.model
        before = [(k.clone(), v.clone()) for k, v in kv_caches]
        fused = self.forward(input_ids, positions, kv_caches, meta)
        fused_caches = [(k.clone(), v.clone()) for k, v in kv_caches]
        for (k, v), (k0, v0) in zip(kv_caches, before, strict=True):
            k.copy_(k0)
            v.copy_(v0)
        x = m.embed_tokens(input_ids)
        ref = m.forward_modules(x, m.rotary.cos_sin(positions, x.dtype), kv_caches, meta)
        assert m._runs_fused(x, meta)
        assert torch.equal(fused, ref), (fused - ref).abs().max()
        for (k, v), (fk, fv) in zip(kv_caches, fused_caches, strict=True):
            assert torch.equal(k, fk) and torch.equal(v, fv)
        self.batches += 1
        self.fused_rows.append(input_ids.shape[0])
        return fused


def run_mixed(eng):
    """Ragged prompts under a small token budget (prefill chunks beside decodes), greedy and
    sampled: the batches the engine forms in service."""
    greedy = SamplingParams(temperature=0, max_tokens=12, ignore_eos=True)
    sampled = SamplingParams(temperature=0.8, seed=3, max_tokens=12, ignore_eos=True)
    return [
        list(o.token_ids)
        for o in eng.generate(PROMPTS, greedy) + eng.generate(PROMPTS[:2], sampled)
    ]


@pytest.mark.parametrize("family", FUSED_FAMILIES)
def test_fused_stack_equals_the_modules_bit_for_bit(tiny_models, family, monkeypatch):
    eng = engine(tiny_models[family], max_num_batched_tokens=16)
    assert eng.runner.model.cpu_stack is not None
    spy = BothWays(eng.runner.model, monkeypatch)
    run_mixed(eng)
    assert spy.batches > 10 and max(spy.fused_rows) == 16 and min(spy.fused_rows) == 1


def test_fused_tokens_equal_the_modules_tokens(llama_dir):
    fused = engine(llama_dir)
    modules = engine(llama_dir)
    modules.runner.model.cpu_stack = None
    assert run_mixed(fused) == run_mixed(modules)


def test_speculative_verifying_rows_run_fused(llama_dir, monkeypatch):
    spec = SpeculativeConfig(num_speculative_tokens=4, prompt_lookup_min=2, prompt_lookup_max=4)
    eng = engine(llama_dir, speculative=spec)
    spy = BothWays(eng.runner.model, monkeypatch)
    repeat = [[10, 11, 12, 13, 14] * 6]
    eng.generate(repeat, SamplingParams(temperature=0, max_tokens=24, ignore_eos=True))
    assert spy.batches > 0 and any(1 < n <= 5 for n in spy.fused_rows[1:])


@pytest.mark.skipif(not linear_bf16_cpu.has_vector_path(), reason="no bf16 kernel vector loop")
def test_bf16_stack_on_the_bf16_kernel(llama_dir, monkeypatch):
    eng = engine(llama_dir, dtype="bfloat16", cpu_prepack=False, max_num_batched_tokens=16)
    model = eng.runner.model
    for layer in model.layers:
        for mod, name in ((layer.self_attn, "qkv_proj"), (layer.self_attn, "o_proj"),
                          (layer.mlp, "gate_up_proj"), (layer.mlp, "down_proj")):  # fmt: skip
            setattr(mod, name, cpu_linear.Bf16Linear(getattr(mod, name)))
    assert model.fuse_cpu_stack() and model.cpu_stack.dtype == torch.bfloat16
    spy = BothWays(model, monkeypatch)
    run_mixed(eng)
    assert spy.batches > 10


def test_not_fused_with_qk_norms_or_without_c_linears(tiny_models):
    assert engine(tiny_models["qwen3"]).runner.model.cpu_stack is None
    assert engine(tiny_models["llama"], cpu_prepack=False).runner.model.cpu_stack is None


def test_kernels_torch_runs_the_modules(llama_dir, monkeypatch):
    fused, modules = engine(llama_dir), engine(llama_dir)
    modules.runner.model.cpu_stack = None

    def refuse(*args, **kwargs):
        raise AssertionError("the fused stack ran with STEPWISE_KERNELS=torch")

    monkeypatch.setattr(fused.runner.model.cpu_stack, "forward", refuse)
    monkeypatch.setenv(dispatch.ENV, "torch")
    assert run_mixed(fused) == run_mixed(modules)


def one_row_batch(eng, slot=3, block=0, context=1):
    model = eng.runner.model
    ids = torch.tensor([7])
    meta = AttentionMetadata(slot_mapping=torch.tensor([slot]), num_decode=1)
    meta.decode_groups.append(DecodeGroup(0, 1, torch.tensor([[block]]), torch.tensor([context])))
    return model, ids, meta


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (dict(slot=64 * 8), "slot lies outside"),
        (dict(block=64), "block id lies outside"),
        (dict(context=9), "context length"),
    ],
)
def test_bad_batches_raise_naming_the_layer(llama_dir, args, message):
    eng = engine(llama_dir)
    model, ids, meta = one_row_batch(eng, **args)
    with pytest.raises(KernelArgumentError, match=f"layer 0.*{message}"):
        model(ids, torch.tensor([0]), eng.kv_cache.layers, meta)


def test_bad_arguments_raise_before_any_work(llama_dir):
    eng = engine(llama_dir)
    stack, caches = eng.runner.model.cpu_stack, eng.kv_cache.layers
    s = stack.shape
    x = torch.randn(2, s.hidden)
    cos = torch.ones(2, s.head_dim)
    rows = dict(slots=torch.tensor([0, 1]), block_tables=torch.zeros(2, 1, dtype=torch.long))
    ctx = torch.tensor([1, 2])
    before = [(k.clone(), v.clone()) for k, v in caches]
    with pytest.raises(KernelArgumentError, match="rows of"):
        stack.forward(x.double(), cos, cos, **rows, context_lens=ctx, kv_caches=caches)
    with pytest.raises(KernelArgumentError, match="tables"):
        bad = dict(rows, block_tables=torch.zeros(2, 1, dtype=torch.int32))
        stack.forward(x, cos, cos, **bad, context_lens=ctx, kv_caches=caches)
    with pytest.raises(KernelArgumentError, match="share one shape"):
        odd = [*caches[:-1], (caches[-1][0][:, :-1], caches[-1][1][:, :-1])]
        stack.forward(x, cos, cos, **rows, context_lens=ctx, kv_caches=odd)
    with pytest.raises(KernelArgumentError, match="one .k, v. cache pair per layer"):
        stack.forward(x, cos, cos, **rows, context_lens=ctx, kv_caches=caches[:-1])
    for (k, v), (k0, v0) in zip(caches, before, strict=True):
        assert torch.equal(k, k0) and torch.equal(v, v0)
    # and the stack still runs: both rows' K/V land in their slots
    stack.forward(x, cos, cos, **rows, context_lens=ctx, kv_caches=caches)
    assert not torch.equal(caches[0][0][:, 0, :2], before[0][0][:, 0, :2])


def test_weights_are_checked_when_the_stack_is_built(llama_dir):
    model = engine(llama_dir).runner.model
    stack = model.cpu_stack
    layer = stack.layers[0]
    short = decoder_cpu.LayerWeights(
        layer.input_norm[:-1], *(getattr(layer, f) for f in list(layer.__dataclass_fields__)[1:])
    )
    kernel = cpu_linear.kernel_of(model.layers[0].self_attn.qkv_proj)
    with pytest.raises(KernelArgumentError, match="layer 1's input_norm"):
        decoder_cpu.DecoderStack([layer, short], stack.shape, kernel)
