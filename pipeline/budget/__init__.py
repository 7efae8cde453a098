"""The budget stage (docs/budget.md): the law's configuration, the actuator ladder, the signals,
the law, a job's effective budget, and their Redis state. The worker is
pipeline/controller/worker.py, the simulator tools/budget_sim.py."""

from pipeline.budget.config import (
    DEFAULT_BUDGET_CONFIG,
    SLO_CLASSES,
    BudgetConfig,
    BudgetSettings,
    SloClassConfig,
    budget_config,
)
from pipeline.budget.effective import Deadline, JobBudget, Pace, deadline_of, job_budget
from pipeline.budget.ladder import ClassLimits, limits_at, rest_limits
from pipeline.budget.law import BudgetController, LawState, control_step
from pipeline.budget.signals import Completed, DecodeReport, RunningJob, Signals, predicted_ratio
from pipeline.budget.state import (
    BudgetReader,
    budget_key,
    publish,
    read,
)

__all__ = [
    "DEFAULT_BUDGET_CONFIG",
    "SLO_CLASSES",
    "BudgetConfig",
    "BudgetSettings",
    "BudgetController",
    "BudgetReader",
    "ClassLimits",
    "Completed",
    "Deadline",
    "DecodeReport",
    "JobBudget",
    "LawState",
    "Pace",
    "RunningJob",
    "Signals",
    "SloClassConfig",
    "budget_config",
    "budget_key",
    "control_step",
    "deadline_of",
    "job_budget",
    "limits_at",
    "predicted_ratio",
    "publish",
    "read",
    "rest_limits",
]
