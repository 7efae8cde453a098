import torch

from pipeline.engine.sampler import Sampler, position_uniform
from pipeline.engine.sampling_params import SamplingParams


def logits_batch(rows=4, vocab=50, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(rows, vocab, generator=g) * 3


def test_greedy_is_argmax_and_reports_logprob_and_entropy():
    x = logits_batch()
    out = Sampler()(x, [SamplingParams(temperature=0)] * 4, [0.5] * 4)
    assert out.token_ids == x.argmax(-1).tolist()
    lp = torch.log_softmax(x, -1)
    assert torch.allclose(torch.tensor(out.logprobs), lp.max(-1).values, atol=1e-6)
    ent = -(lp.exp() * lp).sum(-1)
    assert torch.allclose(torch.tensor(out.entropies), ent, atol=1e-5)


def test_top_k_1_and_tiny_top_p_and_min_p_1_are_greedy():
    x = logits_batch()
    argmax = x.argmax(-1).tolist()
    for p in (
        SamplingParams(temperature=1.0, top_k=1),
        SamplingParams(temperature=1.0, top_p=1e-6),
        SamplingParams(temperature=1.0, min_p=1.0),
    ):
        for u in (0.0, 0.3, 0.999):
            assert Sampler()(x, [p] * 4, [u] * 4).token_ids == argmax


def test_top_k_never_picks_outside_the_k_best():
    x = logits_batch(rows=1, vocab=100)
    top5 = set(x[0].topk(5).indices.tolist())
    p = SamplingParams(temperature=2.0, top_k=5)
    picks = {Sampler()(x, [p], [position_uniform(1, i)]).token_ids[0] for i in range(300)}
    assert picks <= top5 and len(picks) > 1


def test_sampling_frequencies_follow_the_distribution():
    probs = torch.tensor([[0.5, 0.3, 0.2]])
    x = probs.log()
    p = SamplingParams(temperature=1.0)
    n = 4000
    counts = torch.zeros(3)
    for i in range(n):
        counts[Sampler()(x, [p], [position_uniform(7, i)]).token_ids[0]] += 1
    assert torch.allclose(counts / n, probs[0], atol=0.03)


def test_same_seed_and_position_same_token_regardless_of_batch():
    x = logits_batch(rows=3)
    p = SamplingParams(temperature=0.9, top_p=0.9)
    us = [position_uniform(5, 10), position_uniform(6, 10), position_uniform(5, 11)]
    batch = Sampler()(x, [p] * 3, us).token_ids
    alone = [Sampler()(x[i : i + 1], [p], [us[i]]).token_ids[0] for i in range(3)]
    assert batch == alone


def test_position_uniform_is_deterministic_and_in_range():
    vals = [position_uniform(s, i) for s in range(5) for i in range(200)]
    assert all(0.0 <= v < 1.0 for v in vals)
    assert position_uniform(3, 17) == position_uniform(3, 17)
    assert len(set(vals)) == len(vals)
    assert abs(sum(vals) / len(vals) - 0.5) < 0.05
