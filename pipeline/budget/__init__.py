"""The budget stage (docs/budget.md): the control law's configuration, the law, and its Redis
state. The worker is pipeline/budget/worker.py, the simulator pipeline/budget/sim.py."""

from pipeline.budget.config import (
    DEFAULT_BUDGET_CONFIG,
    SLO_CLASSES,
    BudgetConfig,
    SloClassConfig,
)
from pipeline.budget.law import (
    BudgetController,
    BudgetLimits,
    LatencyWindow,
    LawState,
    Observation,
    control_step,
    limits_for,
)
from pipeline.budget.state import (
    BudgetReader,
    budget_key,
    publish,
    read,
)

__all__ = [
    "BudgetConfig",
    "BudgetController",
    "BudgetLimits",
    "BudgetReader",
    "DEFAULT_BUDGET_CONFIG",
    "LatencyWindow",
    "LawState",
    "Observation",
    "SLO_CLASSES",
    "SloClassConfig",
    "budget_key",
    "control_step",
    "limits_for",
    "publish",
    "read",
]
