"""CUDA-graph decode: batch-size bucketing and padded-slot metadata on CPU (the pure parts),
the padded static-buffer forward on CPU in place of a graph, and on a GPU the real graphs."""

import pytest
import torch

from pipeline.engine import Engine, EngineConfig, SamplingParams
from pipeline.engine.attention import AttentionMetadata, DecodeGroup, PrefillChunk
from pipeline.engine.cuda_graph import CudaGraphRunner, DecodeBuffers, bucket_for, graph_batch_sizes


def test_graph_batch_sizes():
    assert graph_batch_sizes(1) == [1]
    assert graph_batch_sizes(5) == [1, 2, 4, 5]
    assert graph_batch_sizes(12) == [1, 2, 4, 8, 12]
    assert graph_batch_sizes(64) == [1, 2, 4, *range(8, 65, 8)]
    with pytest.raises(ValueError):
        graph_batch_sizes(0)


def test_bucket_for_picks_the_smallest_size_that_fits():
    sizes = graph_batch_sizes(24)
    assert [bucket_for(n, sizes) for n in (1, 2, 3, 5, 8, 9, 24)] == [1, 2, 4, 8, 8, 16, 24]
    assert bucket_for(25, sizes) is None and bucket_for(0, sizes) is None


def decode_meta(rows: list[tuple[list[int], int]], slots: list[int]) -> AttentionMetadata:
    """Two decode groups of different widths, as ModelRunner.prepare makes them."""
    meta = AttentionMetadata(torch.tensor(slots), num_decode=len(rows))
    half = len(rows) // 2
    for lo, hi in ((0, half), (half, len(rows))):
        width = max(len(t) for t, _ in rows[lo:hi])
        tables = torch.tensor([t + [0] * (width - len(t)) for t, _ in rows[lo:hi]])
        ctx = torch.tensor([c for _, c in rows[lo:hi]])
        meta.decode_groups.append(DecodeGroup(lo, hi, tables, ctx))
    return meta


def test_fill_copies_the_batch_and_pads_the_rest():
    buf = DecodeBuffers.allocate(8, 4, torch.device("cpu"))
    rows = [([3], 2), ([5, 6], 9), ([1, 2, 7], 20)]
    meta = decode_meta(rows, [13, 25, 30])
    buf.fill(8, torch.tensor([11, 12, 13]), torch.tensor([1, 8, 19]), meta)  # stale rows first
    buf.fill(4, torch.tensor([21, 22]), torch.tensor([4, 5]), decode_meta(rows[:2], [6, 7]))
    assert buf.input_ids[:4].tolist() == [21, 22, 0, 0]
    assert buf.positions[:4].tolist() == [4, 5, 0, 0]
    assert buf.slot_mapping[:4].tolist() == [6, 7, -1, -1]  # -1: the KV store skips the row
    assert buf.context_lens[:4].tolist() == [2, 9, 0, 0]  # 0: attention reads nothing
    assert buf.block_tables[1, :2].tolist() == [5, 6]
    meta4 = buf.metadata(4)
    assert meta4.num_decode == 4 and not meta4.prefills
    assert meta4.decode_groups[0].block_tables.shape == (4, 4)


class EagerGraphs(CudaGraphRunner):
    """The runner with each 'graph' replaced by a plain forward over the static buffers."""

    def capture(self) -> None:
        class Replay:
            def __init__(self, runner, size):
                self.runner, self.size = runner, size

            def replay(self):
                self.runner.outputs[self.size] = self.runner.forward(self.size)

        self.graphs = {size: Replay(self, size) for size in self.sizes}
        self.replays = 0


def test_can_run_only_decode_batches_that_fit():
    runner = EagerGraphs(None, [], 4, 3, torch.device("cpu"))
    meta = decode_meta([([1], 3), ([2], 4)], [1, 2])
    assert runner.can_run(meta, 2)
    assert not runner.can_run(meta, 3)  # a prefill token in the batch
    meta.prefills.append(PrefillChunk(2, 1, 0, torch.tensor([4])))
    assert not runner.can_run(meta, 2)
    wide = decode_meta([([1, 2, 3, 4], 60), ([2], 4)], [1, 2])
    assert not runner.can_run(wide, 2)


def generate(engine, n=5):
    prompts = [[(7 * i + j) % 300 + 5 for j in range(3 + 6 * i)] for i in range(n)]
    outs = engine.generate(prompts, SamplingParams(temperature=0.0, max_tokens=12))
    return [list(o.token_ids) for o in outs]


def test_padded_static_forward_gives_the_same_tokens_on_cpu(llama_dir):
    """Decode steps through the static buffers (padded to 8 rows) generate the same tokens."""
    kw = dict(model=str(llama_dir), dtype="float32", device="cpu", max_num_seqs=6)
    plain = generate(Engine(EngineConfig(**kw)))
    engine = Engine(EngineConfig(**kw))
    r = engine.runner
    max_blocks = -(-engine.max_model_len // r.block_size)
    r.graphs = EagerGraphs(r.model, r.kv_cache.layers, 8, max_blocks, r.device)
    r.graphs.capture()
    calls = []
    run = r.graphs.run
    r.graphs.run = lambda *a: calls.append(a[0].shape[0]) or run(*a)
    assert generate(engine) == plain
    assert calls and max(calls) <= 5 and min(calls) >= 1


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
def test_cuda_graphs_give_the_same_tokens_as_eager(llama_dir, monkeypatch):
    # fp32: a padded batch may take another GEMM algorithm; bf16 rounding could flip a token.
    kw = dict(model=str(llama_dir), dtype="float32", device="cuda", max_num_seqs=6)
    monkeypatch.setenv("STEPWISE_CUDA_GRAPHS", "0")
    eager = Engine(EngineConfig(**kw))
    assert eager.runner.graphs is None
    plain = generate(eager)
    monkeypatch.setenv("STEPWISE_CUDA_GRAPHS", "1")
    engine = Engine(EngineConfig(**kw))
    assert engine.runner.graphs is not None and engine.runner.graphs.graphs
    assert generate(engine) == plain
