"""The budget controller stage (`stepwise worker budget`): live signals in, the budget law
(pipeline/budget/), limits out to Redis (docs/budget.md)."""
