"""The C logits statistics (csrc/logits_stats_cpu.c) against the torch reference.

Vocabularies shorter than a vector, ragged, and SmolLM2's; ties (the first index wins, as
argmax), a constant row, rows that are a slice of a wider tensor, the portable (non-AVX-512)
build, the dispatcher and bad arguments. The C entropy is log s - sum(p (x - m)), which
avoids the reference's cancellation: against an fp64 reference it is the closer of the two.
"""

import platform

import pytest
import torch

from pipeline.engine.sampler import Sampler
from pipeline.engine.sampling_params import SamplingParams
from pipeline.kernels import cpu_build, dispatch, logits_stats, logits_stats_cpu
from pipeline.kernels.logits_stats import LogitsStats, logits_stats_torch


@pytest.fixture(autouse=True)
def built():
    if cpu_build.compiler() is None:
        pytest.skip("no C compiler on this host: the sampler keeps the torch reference")
    assert cpu_build.load(logits_stats_cpu.LIBRARY) is not None


def make_logits(rows, vocab, seed=0, shift=0.0):
    g = torch.Generator().manual_seed(seed)
    return 4 * torch.randn(rows, vocab, generator=g) + shift


def check(stats, logits, atol=2e-5):
    ref = logits_stats_torch(logits.double())
    assert torch.equal(stats.argmax, ref.argmax)
    for name in ("lse", "entropy", "max_prob"):
        got = getattr(stats, name)
        assert got.dtype == torch.float32 and got.shape == (logits.shape[0],)
        torch.testing.assert_close(got.double(), getattr(ref, name), atol=atol, rtol=1e-5)


@pytest.mark.parametrize("vocab", [1, 5, 16, 700, 49152])
def test_matches_reference(vocab):
    logits = make_logits(5, vocab)
    check(LogitsStats(*logits_stats_cpu.logits_stats_cpu(logits)), logits)


def test_entropy_is_closer_to_fp64_than_the_references():
    logits = make_logits(16, 49152, shift=20.0)  # large logits: the reference cancels
    exact = logits_stats_torch(logits.double()).entropy
    c_err = (
        (LogitsStats(*logits_stats_cpu.logits_stats_cpu(logits)).entropy.double() - exact)
        .abs()
        .max()
    )
    torch_err = (logits_stats_torch(logits).entropy.double() - exact).abs().max()
    assert c_err < torch_err and c_err < 2e-5


def test_ties_take_the_first_index():
    logits = make_logits(4, 1000)
    logits[0, [5, 9]] = 50.0  # one vector of 16
    logits[1, [17, 990]] = 50.0  # first in a vector, second in the scalar tail
    logits[2, [3, 19]] = 50.0  # different lanes' vectors: the lower index
    logits[3] = 0.0  # all equal: index 0, max-probability 1 / V, entropy log V
    stats = LogitsStats(*logits_stats_cpu.logits_stats_cpu(logits))
    assert stats.argmax.tolist() == [5, 17, 3, 0]
    torch.testing.assert_close(stats.max_prob[3], torch.tensor(1 / 1000))
    torch.testing.assert_close(stats.entropy[3], torch.tensor(1000.0).log())
    check(stats, logits)


def test_strided_rows_and_threads():
    wide = make_logits(33, 1100)
    logits = wide[:, :1000]  # rows of a wider tensor
    assert not logits.is_contiguous()
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        two = logits_stats_cpu.logits_stats_cpu(logits)
        torch.set_num_threads(1)
        one = logits_stats_cpu.logits_stats_cpu(logits)
    finally:
        torch.set_num_threads(threads)
    for a, b in zip(one, two, strict=True):
        assert torch.equal(a, b)  # rows are independent: the split cannot change a result
    check(LogitsStats(*two), logits)


@pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64"), reason="x86 flag")
@pytest.mark.parametrize("cflags", ["-mno-avx512f", "-mno-avx512f -mno-avx2 -mno-fma"])
def test_avx2_and_portable_builds_match(tmp_path, monkeypatch, cflags):
    logits = make_logits(3, 777)
    logits[1, [40, 41]] = 60.0  # a tie across two vector lanes: the first index wins
    logits[2, [3, 11, 19]] = 55.0  # a tie in one lane's positions of both AVX2 and AVX-512
    monkeypatch.setenv("STEPWISE_KERNELS_DIR", str(tmp_path))
    monkeypatch.setenv("STEPWISE_KERNELS_CFLAGS", cflags)
    cpu_build.load.cache_clear()
    try:
        stats = LogitsStats(*logits_stats_cpu.logits_stats_cpu(logits))
        assert list(tmp_path.glob("logits_stats_cpu-*.so"))
    finally:
        cpu_build.load.cache_clear()
    assert stats.argmax[1] == 40 and stats.argmax[2] == 3
    check(stats, logits)


def test_dispatch_and_the_sampler(monkeypatch):
    logits = make_logits(4, 900)
    assert logits_stats_cpu.is_supported(logits)
    assert not logits_stats_cpu.is_supported(logits.double())  # the reference serves these
    assert not logits_stats_cpu.is_supported(logits.T)
    params = [SamplingParams(temperature=0.0), SamplingParams(temperature=0.8, top_k=5)] * 2
    uniforms = [0.1, 0.7, 0.3, 0.9]
    got = Sampler()(logits, params, uniforms)
    monkeypatch.setenv(dispatch.ENV, "torch")
    ref = Sampler()(logits, params, uniforms)
    assert got.token_ids == ref.token_ids
    torch.testing.assert_close(torch.tensor(got.entropies), torch.tensor(ref.entropies))
    torch.testing.assert_close(torch.tensor(got.logprobs), torch.tensor(ref.logprobs))
    torch.testing.assert_close(
        logits_stats.logits_stats(logits.double()).lse, logits_stats_torch(logits.double()).lse
    )


def test_bad_arguments_raise_not_crash():
    with pytest.raises(dispatch.KernelArgumentError, match="logits"):
        logits_stats_cpu.logits_stats_cpu(torch.zeros(5))
    with pytest.raises(dispatch.KernelArgumentError, match="logits"):
        logits_stats_cpu.logits_stats_cpu(torch.zeros(2, 0))
    with pytest.raises(dispatch.KernelArgumentError, match="fp32"):
        logits_stats_cpu.logits_stats_cpu(torch.zeros(2, 5, dtype=torch.bfloat16))
    with pytest.raises(dispatch.KernelArgumentError, match="contiguous"):
        logits_stats_cpu.logits_stats_cpu(torch.zeros(5, 2).T)
