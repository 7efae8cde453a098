"""Where the integration tests' Kafka and Redis come from (pure: the environment and whether a
Docker engine answers in, a plan out). docs/testing.md says how to choose.

Per service, in order: `STEPWISE_TEST_KAFKA` / `STEPWISE_TEST_REDIS` (a running service);
else `STEPWISE_TEST_SERVICES`: `docker` (testcontainers: Apache Kafka and Redis images; an
error when no Docker engine answers), `embedded` (tansu and redis-server on free ports), or
`auto` (the default: docker when an engine answers, else embedded).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

MODES = ("auto", "docker", "embedded")
ENV_VARS = {"kafka": "STEPWISE_TEST_KAFKA", "redis": "STEPWISE_TEST_REDIS"}


class ServicePlanError(RuntimeError):
    """The services asked for cannot be had (never a silent fallback)."""


@dataclass(frozen=True, slots=True)
class Choice:
    origin: str  # env | docker | embedded
    address: str = ""  # for env: the service's address

    def describe(self) -> str:
        if self.origin == "env":
            return f"{self.address} (from the environment)"
        return "testcontainers (Docker)" if self.origin == "docker" else "embedded process"


def plan(env: Mapping[str, str], docker_answers: Callable[[], bool]) -> dict[str, Choice]:
    """The choice for each service; `docker_answers` is asked at most once."""
    mode = env.get("STEPWISE_TEST_SERVICES", "auto") or "auto"
    if mode not in MODES:
        raise ServicePlanError(
            f"STEPWISE_TEST_SERVICES must be one of {', '.join(MODES)}, got {mode!r}"
        )
    out: dict[str, Choice] = {}
    docker: bool | None = None
    for kind, var in ENV_VARS.items():
        if env.get(var):
            out[kind] = Choice("env", env[var])
            continue
        if mode == "embedded":
            out[kind] = Choice("embedded")
            continue
        if docker is None:
            docker = docker_answers()
        if mode == "docker" and not docker:
            raise ServicePlanError(
                "STEPWISE_TEST_SERVICES=docker, but no Docker engine answers (or testcontainers "
                "is not installed): start one, or use auto / embedded"
            )
        out[kind] = Choice("docker" if docker else "embedded")
    return out


def docker_answers() -> bool:
    """testcontainers importable and a Docker engine answering a ping within 3 s."""
    try:
        import docker

        containers()
        docker.from_env(timeout=3).ping()
    except Exception:  # not installed, no socket, no answer: all mean "no Docker here"
        return False
    return True


def containers() -> tuple[type, type]:
    """testcontainers' Kafka and Redis container classes (their modules moved in 4.x)."""
    try:
        from testcontainers.community.kafka import KafkaContainer
        from testcontainers.community.redis import RedisContainer
    except ImportError:
        from testcontainers.kafka import KafkaContainer
        from testcontainers.redis import RedisContainer
    return KafkaContainer, RedisContainer


def header(choices: Mapping[str, Choice]) -> str:
    return "stepwise services: " + ", ".join(f"{k} {c.describe()}" for k, c in choices.items())


_SESSION: dict[str, Choice] | None = None


def session_plan() -> dict[str, Choice]:
    """This test session's plan (the environment's and Docker's answer), made once."""
    global _SESSION
    if _SESSION is None:
        import os

        _SESSION = plan(os.environ, docker_answers)
    return _SESSION
