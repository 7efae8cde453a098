"""One maximum-model-length decision for the engines and ingest (ModelConfig.max_model_len)."""

from __future__ import annotations

import dataclasses

from pipeline.engine.model_config import ModelConfig

BASE = ModelConfig(
    architecture="LlamaForCausalLM", family="llama",
    vocab_size=100, hidden_size=8, intermediate_size=16, num_hidden_layers=1,
    num_attention_heads=2, num_key_value_heads=1, head_dim=4, rms_norm_eps=1e-6,
    max_position_embeddings=4096, rope_theta=10000.0,
)  # fmt: skip


def test_position_limit_and_request():
    assert BASE.max_model_len() == 4096
    assert BASE.max_model_len(1024) == 1024
    assert BASE.max_model_len(10_000) == 4096  # a request never goes past the model


def test_sliding_window_bounds_the_native_engine_not_vllm():
    windowed = dataclasses.replace(BASE, sliding_window=2048)
    assert windowed.max_model_len() == 2048
    assert windowed.max_model_len(3000) == 2048
    assert windowed.max_model_len(windowed=False) == 4096
    assert windowed.max_model_len(1000, windowed=False) == 1000


def test_ingest_and_engine_ask_the_same_function():
    import inspect

    from pipeline.engine import engine
    from pipeline.ingest import worker

    assert "mc.max_model_len(" in inspect.getsource(engine.Engine.__init__)
    assert "mc.max_model_len(" in inspect.getsource(worker.IngestWorker.setup)
