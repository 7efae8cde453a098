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
