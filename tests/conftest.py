import os

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


def pytest_report_header(config) -> str:
    """Where the integration tests' Kafka and Redis come from (tests/service_plan.py)."""
    from tests.service_plan import ServicePlanError, header, session_plan

    try:
        return header(session_plan())
    except ServicePlanError as exc:
        return f"stepwise services: {exc}"


import pytest  # noqa: E402


@pytest.fixture(autouse=True)
def fresh_settings(monkeypatch):
    """Each test starts from settings built from its environment (pipeline/settings.py builds
    them once per process, as the CLI does). A test that sets or clears a STEPWISE_* variable
    with `monkeypatch` gets settings rebuilt from it at once, as a process started with it
    would."""
    from pipeline import settings

    settings.install(None)
    setenv, delenv = monkeypatch.setenv, monkeypatch.delenv

    def set_and_reload(name, value, prepend=None):
        setenv(name, value, prepend)
        if name.startswith(settings.PREFIX):
            settings.install(None)

    def del_and_reload(name, raising=True):
        delenv(name, raising)
        if name.startswith(settings.PREFIX):
            settings.install(None)

    monkeypatch.setenv, monkeypatch.delenv = set_and_reload, del_and_reload
    yield
    settings.install(None)
