from pathlib import Path

import pytest
import torch

from tests.model_factory import VARIANTS, make_tiny_model

torch.set_num_threads(1)


@pytest.fixture(scope="session")
def model_root(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("models")


@pytest.fixture(scope="session")
def tiny_models(model_root) -> dict[str, Path]:
    """Every family's random-weight checkpoint, written once per test session."""
    return {name: make_tiny_model(name, model_root) for name in VARIANTS}


@pytest.fixture(scope="session")
def llama_dir(tiny_models) -> Path:
    return tiny_models["llama"]


@pytest.fixture
def span_store(tmp_path) -> Path:
    """A fresh tracer (every job sampled) writing to a local span store in `tmp_path`."""
    from pipeline.tracing import setup

    setup.shutdown()
    setup.init_tracing("test", 1.0, str(tmp_path))
    yield tmp_path
    setup.shutdown()
