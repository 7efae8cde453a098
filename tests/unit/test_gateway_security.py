"""Secure by default (issue 24, item 6): a gateway bound beyond loopback with no API keys refuses
to start unless told to run open, which it then says loudly; loopback stays open and quiet."""

from __future__ import annotations

import logging

import pytest

from pipeline.config import PipelineConfig
from pipeline.gateway.config import GatewayConfig, InsecureGatewayError, is_loopback
from pipeline.gateway.main import warn_if_open
from pipeline.settings import Settings
from pipeline.stage.processes import free_port
from tests.unit.test_settings import _cli

BEYOND = ("0.0.0.0", "::", "[::]", "10.1.2.3", "192.168.0.7", "fe80::1", "gw.example.com", "")
LOOPBACK = ("127.0.0.1", "127.8.9.1", "::1", "[::1]", "localhost", "LOCALHOST")
# The way out each refusal must name: keys (either source), or running open on purpose.
WAYS_OUT = ("STEPWISE_API_KEYS=", "STEPWISE_API_KEYS_REDIS=1", "--allow-open")


@pytest.mark.parametrize("host", LOOPBACK)
def test_loopback_hosts(host):
    assert is_loopback(host)


@pytest.mark.parametrize("host", BEYOND)
def test_open_gateway_beyond_loopback_refuses(host):
    with pytest.raises(InsecureGatewayError) as caught:
        GatewayConfig(host=host)
    assert caught.value.code == "insecure_gateway"
    message = str(caught.value)
    assert f"{host}:8000" in message and "no API keys" in message
    for way in (*WAYS_OUT, "STEPWISE_GATEWAY_ALLOW_OPEN=1"):
        assert way in message, way


def test_keys_from_config_or_redis_let_it_bind_anywhere(caplog):
    with_redis = PipelineConfig(redis="redis://127.0.0.1:6379/0")
    configs = [
        GatewayConfig(host="0.0.0.0", api_keys={"sk-a": "tenantA"}),
        GatewayConfig(host="0.0.0.0", api_keys_redis=True, pipeline=with_redis),
    ]
    with caplog.at_level(logging.INFO):
        for config in configs:
            assert config.exposure_warning() is None
            warn_if_open(config)
    assert caplog.records == []


def test_allow_open_serves_beyond_loopback_and_warns(caplog):
    config = GatewayConfig(host="0.0.0.0", port=8123, allow_open=True)
    with caplog.at_level(logging.INFO):
        warn_if_open(config)
    (record,) = caplog.records
    assert record.levelno == logging.WARNING
    assert "OPEN GATEWAY" in record.getMessage() and "0.0.0.0:8123" in record.getMessage()


def test_loopback_without_keys_is_open_and_quiet(caplog):
    config = GatewayConfig()
    assert config.host == "127.0.0.1" and not config.api_keys
    with caplog.at_level(logging.INFO):
        for host in LOOPBACK:
            warn_if_open(GatewayConfig(host=host))
    assert caplog.records == []


def test_settings_bind_loopback_by_default_and_read_allow_open():
    assert GatewayConfig.from_settings(Settings.load(env={})).host == "127.0.0.1"
    with pytest.raises(InsecureGatewayError):
        GatewayConfig.from_settings(Settings.load(env={"STEPWISE_GATEWAY_HOST": "0.0.0.0"}))
    by_env = Settings.load(
        env={"STEPWISE_GATEWAY_HOST": "0.0.0.0", "STEPWISE_GATEWAY_ALLOW_OPEN": "1"}
    )
    assert GatewayConfig.from_settings(by_env).allow_open
    by_flag = Settings.load(env={}, flags={"GATEWAY_HOST": "::", "GATEWAY_ALLOW_OPEN": True})
    config = GatewayConfig.from_settings(by_flag)
    assert (config.host, config.allow_open) == ("::", True)
    keyed = Settings.load(env={"STEPWISE_GATEWAY_HOST": "0.0.0.0", "STEPWISE_API_KEYS": "k:t"})
    assert GatewayConfig.from_settings(keyed).api_keys == {"k": "t"}


# -- the CLI: exit status 2 and the message, before any connection ---------------------------


@pytest.mark.parametrize("command", [("worker", "gateway"), ("up",)])
def test_cli_refuses_an_open_gateway_beyond_loopback(command):
    # A Kafka nobody listens on: the refusal must come before anything connects or starts.
    out = _cli(*command, "--host", "0.0.0.0", env={"STEPWISE_KAFKA": "127.0.0.1:9"})
    assert out.returncode == 2, out.stderr
    assert "stepwise: error [insecure_gateway]:" in out.stderr
    for way in WAYS_OUT:
        assert way in out.stderr, way
    assert "starting services" not in out.stdout  # `up` started nothing


def test_cli_allow_open_warns_at_start():
    # No Kafka at all: past the check the gateway logs its warning, then fails its start-up.
    port = free_port()
    out = _cli(
        "worker", "gateway", "--host", "0.0.0.0", "--allow-open",
        env={"STEPWISE_GATEWAY_PORT": str(port)},
    )  # fmt: skip
    assert out.returncode not in (0, 2), out.stderr  # 2 would be the refusal
    assert f"WARNING OPEN GATEWAY: listening on 0.0.0.0:{port}" in out.stderr
    assert "the gateway needs STEPWISE_KAFKA" in out.stderr
