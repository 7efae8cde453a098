"""vLLM is set up on first use, not by everyone's setup (pipeline/vllm/server.py, ensure_vllm)."""

from __future__ import annotations

import subprocess

import pytest

from pipeline.vllm import server


def test_nothing_is_built_where_vllm_is_there(monkeypatch):
    monkeypatch.setattr(server, "vllm_installed", lambda: True)
    ran = []
    server.ensure_vllm(run=lambda *a, **k: ran.append(a))
    assert ran == []


def test_a_missing_vllm_is_built_once_with_the_setup_script(monkeypatch, capsys):
    there = iter([False, True])
    monkeypatch.setattr(server, "vllm_installed", lambda: next(there))
    ran = []
    server.ensure_vllm(run=lambda cmd, check: ran.append((cmd, check)))
    assert ran == [([str(server.SETUP_SCRIPT)], True)]
    assert "building .venv-vllm (first use" in capsys.readouterr().err


def test_a_failed_setup_is_a_clear_error(monkeypatch):
    monkeypatch.setattr(server, "vllm_installed", lambda: False)

    def fails(cmd, check):
        raise subprocess.CalledProcessError(1, cmd)

    with pytest.raises(server.VLLMError, match="setting up vLLM failed"):
        server.ensure_vllm(run=fails)


def test_a_named_interpreter_without_vllm_is_not_built_over(monkeypatch):
    monkeypatch.setenv("STEPWISE_VLLM_PYTHON", "/nowhere/python")
    monkeypatch.setattr(server, "vllm_installed", lambda: False)
    with pytest.raises(server.VLLMError, match="no vLLM at /nowhere/python"):
        server.ensure_vllm(run=lambda *a, **k: pytest.fail("built over a named interpreter"))
