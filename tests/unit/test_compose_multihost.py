"""docker-compose.yml's `mooncake` profile: prefill and decode as on two hosts (no shared IPC
namespace), the KV over Mooncake, scraped under the CPU services' names, and the image that
can run it (validated with `docker-compose config`; no Docker engine runs here)."""

from __future__ import annotations

from tests.unit.test_infra import COMPOSE, REQUIRED_ENV, ROOT, compose_config, load_yaml

PAIR = ("prefill-mc", "decode-mc")


def services() -> dict[str, dict]:
    return load_yaml(COMPOSE)["services"]


def test_the_profile_validates():
    proc = compose_config("-q", env=REQUIRED_ENV, profile="mooncake")
    assert proc.returncode == 0, proc.stderr


def test_prefill_and_decode_share_no_ipc_and_hand_off_over_mooncake():
    s = services()
    for name in PAIR:
        assert s[name]["profiles"] == ["mooncake"]
        assert s[name]["ipc"] == "private"  # decode cannot map prefill's /dev/shm
        assert s[name]["environment"]["STEPWISE_KV_TRANSPORT"] == "mooncake"
    prefill, decode = (s[n] for n in PAIR)
    # Decode reaches prefill's transfer engine by the address prefill advertises.
    assert prefill["environment"]["STEPWISE_MOONCAKE_HOST"] == prefill["hostname"] == "prefill-mc"
    assert int(decode["environment"]["STEPWISE_KV_READ_TIMEOUT_MS"]) > 0
    assert decode["depends_on"]["prefill-mc"]["condition"] == "service_started"
    # Scraped as prefill / decode (infra/prometheus.yml finds targets by those names).
    assert "prefill" in prefill["networks"]["default"]["aliases"]
    assert "decode" in decode["networks"]["default"]["aliases"]


def test_the_image_can_run_it():
    dockerfile = (ROOT / "infra" / "Dockerfile").read_text()
    assert "libibverbs1" in dockerfile and "ARG STEPWISE_EXTRAS=mooncake" in dockerfile
    assert 'pip install ".[${STEPWISE_EXTRAS}]"' in dockerfile
    pyproject = (ROOT / "pyproject.toml").read_text()
    assert "mooncake = [" in pyproject
