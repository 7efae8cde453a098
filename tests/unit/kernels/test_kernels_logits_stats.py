"""Triton logits statistics vs the torch reference (the sampler's original expressions).

Vocabularies of one tile, several tiles and a ragged last tile; the maximum tied within and
across tiles (the first index wins, as argmax). Tolerances: fp32 1e-5 on lse/entropy,
max-probability 1e-6; bf16/fp16 logits are compared against the reference on their fp32 cast.
"""

import pytest
import torch

from pipeline.engine.sampler import Sampler
from pipeline.engine.sampling_params import SamplingParams
from pipeline.kernels import dispatch
from pipeline.kernels.logits_stats import logits_stats_torch
from tests.unit.kernels.kernel_helpers import DTYPES


def make_logits(device, dtype, rows, vocab, seed=0):
    g = torch.Generator().manual_seed(seed)
    return (4 * torch.randn(rows, vocab, generator=g)).to(dtype).to(device)


def check(stats, logits):
    ref = logits_stats_torch(logits.float().cpu())
    assert torch.equal(stats.argmax.cpu(), ref.argmax)
    for name, atol in (("lse", 1e-5), ("entropy", 1e-5), ("max_prob", 1e-6)):
        got = getattr(stats, name)
        assert got.dtype == torch.float32
        torch.testing.assert_close(got.cpu(), getattr(ref, name), atol=atol, rtol=1e-5)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("vocab", [1, 700, 2500])  # one tile, a ragged one, three tiles
def test_matches_reference(kernels, device, dtype, vocab):
    logits = make_logits(device, dtype, 3, vocab)
    check(kernels("logits_stats").logits_stats_triton(logits), logits)


def test_ties_take_the_first_index_within_and_across_tiles(kernels, device):
    logits = make_logits(device, torch.float32, 3, 2500)
    logits[0, [5, 9]] = 50.0  # same tile
    logits[1, [1000, 2400]] = 50.0  # tiles 0 and 2 (1024-wide on CPU)
    logits[2] = 0.0  # all equal: index 0, max-probability 1 / V, entropy log V
    stats = kernels("logits_stats").logits_stats_triton(logits)
    assert stats.argmax.tolist() == [5, 1000, 0]
    check(stats, logits)


def test_reference_is_the_samplers_original_computation(monkeypatch):
    """The reference keeps the expressions Sampler had before the kernels."""
    monkeypatch.setenv(dispatch.ENV, "torch")  # on CPU the sampler would take the C kernel
    logits = make_logits("cpu", torch.float32, 4, 300)
    logits[1, [3, 200]] = 30.0
    lse = torch.logsumexp(logits, dim=-1, keepdim=True)
    entropy = (lse - (torch.softmax(logits, dim=-1) * logits).sum(-1, keepdim=True)).squeeze(1)
    stats = logits_stats_torch(logits)
    assert torch.equal(stats.lse, lse.squeeze(1)) and torch.equal(stats.entropy, entropy)
    assert torch.equal(stats.argmax, logits.argmax(dim=-1))
    out = Sampler()(logits, [SamplingParams(temperature=0.0)] * 4, [0.5] * 4)
    assert out.token_ids == logits.argmax(dim=-1).tolist()
    assert out.entropies == entropy.tolist()
    assert out.logprobs == (logits.gather(1, logits.argmax(-1)[:, None]) - lse).squeeze(1).tolist()


def test_sampler_through_triton_matches(kernels, device, monkeypatch):
    mod = kernels("logits_stats")
    monkeypatch.setattr(dispatch, "triton_module", lambda name: mod)
    monkeypatch.setenv(dispatch.ENV, "triton")
    logits = make_logits(device, torch.float32, 3, 900)
    params = [SamplingParams(temperature=0.0), SamplingParams(temperature=0.8, top_k=5)] * 2
    got = Sampler()(logits, params[:3], [0.1, 0.7, 0.3])
    monkeypatch.setenv(dispatch.ENV, "torch")
    ref = Sampler()(logits.cpu(), params[:3], [0.1, 0.7, 0.3])
    assert got.token_ids == ref.token_ids
    torch.testing.assert_close(torch.tensor(got.entropies), torch.tensor(ref.entropies))
    torch.testing.assert_close(torch.tensor(got.logprobs), torch.tensor(ref.logprobs))


def test_wrapper_rejects_bad_arguments(kernels, device):
    mod = kernels("logits_stats")
    with pytest.raises(dispatch.KernelArgumentError, match=r"\[S, V\]"):
        mod.logits_stats_triton(torch.zeros(5, device=device))
    with pytest.raises(dispatch.KernelArgumentError, match="dtype"):
        mod.logits_stats_triton(torch.zeros(2, 5, dtype=torch.long, device=device))
    with pytest.raises(dispatch.KernelArgumentError, match="contiguous"):
        mod.logits_stats_triton(torch.zeros(5, 2, device=device).T)
