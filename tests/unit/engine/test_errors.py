"""Bad checkpoints and bad requests fail with typed, readable errors."""

import json
import shutil

import pytest

from pipeline.engine import Engine, EngineConfig, Request, SamplingParams
from pipeline.engine.model_config import ModelConfig
from pipeline.errors import (
    InvalidRequestError,
    ModelLoadError,
    PromptTooLongError,
    UnsupportedModelError,
)


def test_unsupported_architecture(tmp_path, llama_dir):
    path = tmp_path / "gpt2ish"
    shutil.copytree(llama_dir, path)
    cfg = json.loads((path / "config.json").read_text())
    cfg["architectures"] = ["GPT2LMHeadModel"]
    (path / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(UnsupportedModelError, match="GPT2LMHeadModel.*supported: "):
        Engine(EngineConfig(model=str(path)))


def gpt_oss_dir(tmp_path, llama_dir):
    """A checkpoint whose architecture only vLLM runs (its sizes are the tiny llama's)."""
    path = tmp_path / "gptoss"
    shutil.copytree(llama_dir, path)
    cfg = json.loads((path / "config.json").read_text())
    cfg.update(architectures=["GptOssForCausalLM"], model_type="gpt_oss")
    (path / "config.json").write_text(json.dumps(cfg))
    return path


def test_an_architecture_the_engine_cannot_run_names_the_vllm_engine(tmp_path, llama_dir):
    path = gpt_oss_dir(tmp_path, llama_dir)
    with pytest.raises(UnsupportedModelError, match="GptOssForCausalLM") as e:
        ModelConfig.from_dir(path)
    assert "--engine vllm" in str(e.value) and "native engine" in str(e.value)
    # vLLM runs it: the vLLM engine and ingest read only its sizes and limits.
    mc = ModelConfig.from_dir(path, native=False)
    assert mc.architecture == "GptOssForCausalLM" and mc.max_model_len() > 0


def test_stepwise_up_refuses_it_before_starting_anything(tmp_path, llama_dir, capsys):
    from pipeline.cli.main import main

    path = gpt_oss_dir(tmp_path, llama_dir)
    assert main(["up", "--model", str(path)]) == 2
    err = capsys.readouterr().err
    assert "[unsupported_model]" in err and "--engine vllm" in err and "GptOssForCausalLM" in err


def test_missing_directory_config_and_weights(tmp_path, llama_dir):
    with pytest.raises(ModelLoadError, match="not found"):
        Engine(EngineConfig(model=str(tmp_path / "nope")))
    with pytest.raises(ModelLoadError, match="no config.json"):
        Engine(EngineConfig(model=str(tmp_path)))
    path = tmp_path / "noweights"
    shutil.copytree(llama_dir, path)
    for f in path.glob("*.safetensors"):
        f.unlink()
    with pytest.raises(ModelLoadError, match="safetensors"):
        Engine(EngineConfig(model=str(path)))


def test_bad_requests(llama_dir):
    engine = Engine(EngineConfig(model=str(llama_dir), max_model_len=64, num_kv_blocks=32))
    with pytest.raises(PromptTooLongError):
        engine.add(Request("long", [1] * 64))
    with pytest.raises(InvalidRequestError, match="empty"):
        engine.add(Request("empty", []))
    with pytest.raises(InvalidRequestError, match="token ids"):
        engine.add(Request("oov", [1, 10_000]))
    engine.add(Request("dup", [1, 2]))
    with pytest.raises(InvalidRequestError, match="already"):
        engine.add(Request("dup", [1, 2]))
    with pytest.raises(InvalidRequestError):
        SamplingParams(top_p=0)
    with pytest.raises(InvalidRequestError, match="no tokenizer"):
        engine.generate(["text prompt"])


def test_a_request_larger_than_the_pool_is_refused(llama_dir):
    engine = Engine(EngineConfig(model=str(llama_dir), num_kv_blocks=2, block_size=16))
    with pytest.raises(InvalidRequestError, match="KV blocks"):
        engine.add(Request("big", [1] * 20, SamplingParams(max_tokens=40)))


def test_the_length_limit_is_the_context_window(llama_dir):
    engine = Engine(EngineConfig(model=str(llama_dir), max_model_len=24, num_kv_blocks=32))
    params = SamplingParams(temperature=0, max_tokens=100, ignore_eos=True)
    out = engine.generate([[1] * 20], params)
    assert out[0].finish_reason == "length" and len(out[0].token_ids) == 4
