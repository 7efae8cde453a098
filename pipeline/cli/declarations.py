"""Every module that declares `STEPWISE_*` settings (pipeline/settings.py), imported before the
settings are loaded, so `stepwise config`, the unknown-variable report and the flags of
`stepwise up` / `stepwise worker` see all of them. Each is light: a config dataclass and what
it needs, no model, no web stack."""

from pipeline import config
from pipeline.budget import config as budget_config
from pipeline.client import config as client_config
from pipeline.gateway import config as gateway_config
from pipeline.local import stack
from pipeline.telemetry import serve as telemetry_serve
from pipeline.tracing import setup as tracing_setup
from pipeline.verify import config as verify_config

MODULES = (
    config,
    budget_config,
    client_config,
    gateway_config,
    stack,
    telemetry_serve,
    tracing_setup,
    verify_config,
)
