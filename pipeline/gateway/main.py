"""`stepwise worker gateway`: serve the gateway with uvicorn on STEPWISE_GATEWAY_PORT."""

from __future__ import annotations

import logging

import uvicorn

from pipeline.gateway.app import create_app
from pipeline.gateway.config import GatewayConfig
from pipeline.settings import Settings
from pipeline.stage.processes import EXIT_GRACE_S, exit_within

log = logging.getLogger(__name__)
GRACEFUL_SHUTDOWN_S = 10.0  # open connections after SIGTERM, then closed
# SIGTERM to the process's end, whatever hangs on the way (`stepwise up` kills at 60 s): a
# clean-clone CI run saw the gateway still in its shutdown 60 s after SIGTERM, twice.
SHUTDOWN_DEADLINE_S = 40.0


class _Server(uvicorn.Server):
    """uvicorn's server, with the whole shutdown bounded from the first SIGTERM or SIGINT."""

    def handle_exit(self, sig, frame) -> None:
        if not self.should_exit:
            exit_within(SHUTDOWN_DEADLINE_S, 0, why="the gateway's shutdown hung")
        super().handle_exit(sig, frame)


def warn_if_open(config: GatewayConfig) -> None:
    """Log, loudly and first, that this gateway serves beyond loopback without keys on purpose
    (allow_open): whoever reads the start-up log learns it is open."""
    warning = config.exposure_warning()
    if warning is not None:
        log.warning(warning)


def main(config: GatewayConfig) -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    warn_if_open(config)
    server = _Server(
        uvicorn.Config(
            create_app(config),
            host=config.host,
            port=config.port,
            log_level="info",
            ws_per_message_deflate=config.ws_deflate,
            # A client that keeps its connection open (a WebSocket, a stream) must not hold the
            # shutdown: past this, uvicorn closes what is left.
            timeout_graceful_shutdown=GRACEFUL_SHUTDOWN_S,
        )
    )
    server.run()


def serve(current: Settings) -> int:
    """`stepwise worker gateway`: the gateway from the process's settings. Once uvicorn has
    shut down, the process ends within EXIT_GRACE_S whatever the interpreter's exit waits on."""
    try:
        main(GatewayConfig.from_settings(current))
    finally:
        exit_within(EXIT_GRACE_S, 0)
    return 0
