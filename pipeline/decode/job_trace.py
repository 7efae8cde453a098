"""A traced job's spans on decode's I/O side, built from the core's TraceMarks (docs/tracing.md).

Under the job's `decode` span: a `kv_import` span (transport, bytes; the fallback to a second
prefill and why, in error, when the import failed), then one `step` span per step generated,
from the step boundary before it to its end (a resampled step after a backtrack is a new span;
steps cut off by a backtrack keep theirs, since that time was spent). Each verify check is a
child of its step's span, so a verdict sits under the step it judged. Verdicts, backtracks,
forced answers, early exits and budget cuts (the job's thinking cap tightened: by the class, or
by its deadline at the live pace) are events on the decode span at the moment the core saw them.
"""

from __future__ import annotations

from opentelemetry.trace import Span

from pipeline import schema
from pipeline.decode.messages import TraceMark
from pipeline.tracing import spans

EVENTS = ("verdict", "backtrack", "cut", "forced_answer", "early_exit", "budget_cut")


class JobTrace:
    def __init__(self, span: Span) -> None:
        self.span = span
        # Where the next step begins: the decode span's start, then each step's end (or the
        # rollback that cut the steps after it).
        self.boundary_ns: int = getattr(span, "start_time", None) or spans.now_ns()
        self.steps: dict[int, Span] = {}  # step index -> the span of its latest attempt

    def apply(self, mark: TraceMark) -> None:
        attrs = dict(mark.attrs)
        if mark.kind == "kv_import":
            child = spans.start_child(self.span, "kv_import", start_ns=mark.start_ns, **attrs)
            failure = attrs.get("reason") if attrs.get("fallback") else None
            spans.end(child, error=str(failure) if failure else None, end_ns=mark.ts_ns)
            self.boundary_ns = mark.ts_ns
        elif mark.kind == "step":
            self._step(mark.step, mark.ts_ns, **attrs)
        elif mark.kind in EVENTS:
            if mark.step >= 0:
                attrs["step"] = mark.step
            self.span.add_event(mark.kind, attrs, timestamp=mark.ts_ns)
            if mark.kind in ("backtrack", "cut"):
                # the next step (resampled, or the answer) starts here
                self.boundary_ns = mark.ts_ns

    def _step(self, index: int, end_ns: int, **attrs: object) -> None:
        start = min(self.boundary_ns, end_ns)
        span = spans.start_child(self.span, "step", start_ns=start, index=index, **attrs)
        spans.end(span, end_ns=end_ns)
        self.steps[index] = span
        self.boundary_ns = end_ns

    def parent_of_check(self, step: int) -> Span:
        """The span a check of step `step` joins: that step's, else the job's."""
        return self.steps.get(step, self.span)

    def finish(self, result: schema.Result) -> None:
        """End the decode span with the job's outcome; steps the core kept without a mark (the
        last ones of a job that verifies nothing, flushed at its end) get their spans now."""
        now = spans.now_ns()
        for i in range(len(result.steps)):
            if i not in self.steps:
                self._step(i, now)
        u, v = result.usage, result.verification
        error = f"{result.error.code}: {result.error.message}" if result.error else None
        spans.end(
            self.span, error=error, status=result.status, stop_reason=result.budget.stop_reason,
            steps=u.steps, backtracks=u.backtracks, completion_tokens=u.completion_tokens,
            verification=v.status if v is not None else None,
        )  # fmt: skip
