"""tests/service_plan.py: where the integration tests' Kafka and Redis come from."""

from __future__ import annotations

import pytest

from tests.service_plan import Choice, ServicePlanError, header, plan


def never() -> bool:
    raise AssertionError("Docker was asked although the plan did not need it")


def test_services_from_the_environment_win_and_docker_is_not_asked():
    env = {"STEPWISE_TEST_KAFKA": "kafka:9092", "STEPWISE_TEST_REDIS": "redis://r:6379/0"}
    got = plan(env, never)
    assert got == {"kafka": Choice("env", "kafka:9092"), "redis": Choice("env", "redis://r:6379/0")}
    assert "kafka:9092 (from the environment)" in header(got)


def test_auto_uses_docker_when_an_engine_answers_else_embedded():
    assert {c.origin for c in plan({}, lambda: True).values()} == {"docker"}
    assert {c.origin for c in plan({}, lambda: False).values()} == {"embedded"}


def test_docker_asked_for_without_an_engine_fails_loudly():
    with pytest.raises(ServicePlanError, match="no Docker engine answers"):
        plan({"STEPWISE_TEST_SERVICES": "docker"}, lambda: False)


def test_a_mix_and_the_embedded_mode():
    env = {"STEPWISE_TEST_KAFKA": "k:1", "STEPWISE_TEST_SERVICES": "docker"}
    assert plan(env, lambda: True) == {"kafka": Choice("env", "k:1"), "redis": Choice("docker")}
    env = {"STEPWISE_TEST_SERVICES": "embedded"}
    assert {c.origin for c in plan(env, never).values()} == {"embedded"}


def test_an_unknown_mode_is_an_error():
    with pytest.raises(ServicePlanError, match="one of auto, docker, embedded"):
        plan({"STEPWISE_TEST_SERVICES": "podman"}, never)
