"""The C inverse-CDF sampler (csrc/sample_cpu.c) against the torch reference (kernels/sample.py).

Vocabularies shorter than a block, ragged, SmolLM2's and one long enough to need longer blocks;
temperatures around 1; uniforms at 0 and just below 1 (the first and last token with any
probability); a known distribution inverted on a grid of uniforms; rows alone against rows in a
batch; rows that are a slice of a wider tensor; the portable build; the sampler's dispatch; bad
arguments. The two sides add in different orders, so they may pick neighbours only where u
lies within rounding of a boundary between two tokens: every disagreement is checked to be one.
"""

import platform

import pytest
import torch

from pipeline.engine.sampler import Sampler
from pipeline.engine.sampling_params import SamplingParams
from pipeline.kernels import cpu_build, sample_cpu
from pipeline.kernels.dispatch import KernelArgumentError
from pipeline.kernels.sample import sample, sample_torch


@pytest.fixture(autouse=True)
def built():
    if cpu_build.compiler() is None:
        pytest.skip("no C compiler on this host: the sampler keeps the torch reference")
    assert cpu_build.load(sample_cpu.LIBRARY) is not None


def case(rows, vocab, temp, seed=0):
    g = torch.Generator().manual_seed(seed)
    logits = 4 * torch.randn(rows, vocab, generator=g)
    return logits, torch.full((rows,), float(temp)), torch.rand(rows, generator=g)


def assert_same_or_at_a_boundary(logits, temps, u, got):
    """got equals the reference's pick, or u is within rounding of the boundary between them."""
    want = sample_torch(logits, temps, u)
    cdf = torch.softmax(logits.double() / temps.double()[:, None], dim=-1).cumsum(-1)
    for r in torch.nonzero(got != want).flatten().tolist():
        lo = min(int(got[r]), int(want[r]))
        assert abs(float(cdf[r, lo]) - float(u[r])) < 1e-5, (r, int(got[r]), int(want[r]))
    assert (got == want).float().mean() >= 0.95


@pytest.mark.parametrize("vocab", [1, 7, 256, 257, 1000, 49152])
@pytest.mark.parametrize("temp", [0.3, 0.7, 1.0, 2.0])
def test_matches_the_reference(vocab, temp):
    logits, temps, u = case(64, vocab, temp, seed=vocab)
    got = sample_cpu.sample_cpu(logits, temps, u)
    assert got.dtype == torch.int64 and got.shape == (64,)
    assert bool(((got >= 0) & (got < vocab)).all())
    assert_same_or_at_a_boundary(logits, temps, u, got)


def test_a_vocabulary_that_needs_longer_blocks():
    logits, temps, u = case(3, 300_000, 1.0)  # over 1024 blocks of 256
    logits[:, 299_990] = 40.0  # most of the mass at the end: the last block is reached
    assert_same_or_at_a_boundary(logits, temps, u, sample_cpu.sample_cpu(logits, temps, u))


def test_u_at_the_ends_picks_the_first_and_last_token_with_any_probability():
    logits = torch.zeros(2, 600)
    logits[:, :5] = -1e4  # exp underflows to 0: no probability
    logits[:, 590:] = -1e4
    temps = torch.ones(2)
    u = torch.tensor([0.0, 1.0 - 2.0**-24])
    assert sample_cpu.sample_cpu(logits, temps, u).tolist() == [5, 589]


def test_a_known_distribution_inverted_on_a_grid():
    probs = torch.tensor([0.5, 0.25, 0.125, 0.0625, 0.0625])
    n = 4096
    logits = probs.log().repeat(n, 1)
    u = (torch.arange(n) + 0.5) / n
    picks = sample_cpu.sample_cpu(logits, torch.ones(n), u)
    counts = torch.bincount(picks, minlength=5).float()
    assert torch.allclose(counts / n, probs, atol=2 / n)
    assert bool((picks[1:] >= picks[:-1]).all())  # an inverse CDF: monotone in u


def test_a_row_alone_picks_what_it_picks_in_a_batch():
    logits, temps, u = case(13, 3000, 0.8, seed=5)
    batch = sample_cpu.sample_cpu(logits, temps, u)
    alone = [
        int(sample_cpu.sample_cpu(logits[r : r + 1], temps[r : r + 1], u[r : r + 1]))
        for r in range(13)
    ]
    assert batch.tolist() == alone


def test_rows_sliced_from_a_wider_tensor():
    wide, temps, u = case(9, 1200, 0.9, seed=3)
    logits = wide[:, :1000]
    assert logits.stride(0) == 1200
    got = sample_cpu.sample_cpu(logits, temps, u)
    assert torch.equal(got, sample_cpu.sample_cpu(logits.contiguous(), temps, u))
    assert_same_or_at_a_boundary(logits.contiguous(), temps, u, got)


@pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64"), reason="x86 flags")
def test_portable_build(tmp_path, monkeypatch):
    logits, temps, u = case(16, 5000, 0.7, seed=9)
    monkeypatch.setenv("STEPWISE_KERNELS_DIR", str(tmp_path))
    monkeypatch.setenv("STEPWISE_KERNELS_CFLAGS", "-mno-avx512f -mno-avx2 -mno-fma")
    cpu_build.load.cache_clear()
    try:
        got = sample_cpu.sample_cpu(logits, temps, u)
        assert list(tmp_path.glob("sample_cpu-*.so"))
    finally:
        cpu_build.load.cache_clear()
    assert_same_or_at_a_boundary(logits, temps, u, got)


def test_the_sampler_dispatches_unfiltered_rows_here(monkeypatch):
    calls = []
    real = sample_cpu.sample_cpu
    monkeypatch.setattr(sample_cpu, "sample_cpu", lambda *a: calls.append(1) or real(*a))
    logits, _, u = case(6, 2000, 1.0, seed=11)
    params = [SamplingParams(temperature=0.7)] * 3 + [SamplingParams(temperature=0.0)] * 2
    out = Sampler()(logits[:5].clone(), params, u[:5].tolist())
    assert calls == [1]  # one call for the three sampled rows; the greedy rows take argmax
    assert out.token_ids[3:] == logits[3:5].argmax(-1).tolist()
    temps = torch.full((3,), 0.7)
    assert_same_or_at_a_boundary(logits[:3], temps, u[:3], torch.tensor(out.token_ids[:3]))
    # a batch with a filtered row (top-p) samples its rows through the filtered torch path
    Sampler()(logits.clone(), [*params, SamplingParams(temperature=0.7, top_p=0.9)], u.tolist())
    assert calls == [1]
    monkeypatch.setenv("STEPWISE_KERNELS", "torch")  # the references everywhere
    assert torch.equal(sample(logits, torch.ones(6), u), sample_torch(logits, torch.ones(6), u))
    assert calls == [1]


@pytest.mark.parametrize(
    "bad",
    [
        lambda l, t, u: (l.half(), t, u),
        lambda l, t, u: (l[0], t, u),
        lambda l, t, u: (l, t[:2], u),
        lambda l, t, u: (l, t, u[:1]),
        lambda l, t, u: (l, torch.zeros_like(t), u),
        lambda l, t, u: (l.t(), t, u),
    ],
)
def test_bad_arguments_raise(bad):
    logits, temps, u = case(4, 4, 1.0)
    with pytest.raises(KernelArgumentError):
        sample_cpu.sample_cpu(*bad(logits, temps, u))
