"""`stepwise stream "problem"`: a job's reasoning rendered live (rich) from the gateway's
WebSocket. `StreamView` is the pure part: Events and the Result in, a renderable out."""

from __future__ import annotations

import argparse
import asyncio
from dataclasses import dataclass

from rich.console import Console, Group
from rich.live import Live
from rich.text import Text

from pipeline import schema, settings
from pipeline.client.clients import GatewayClient
from pipeline.client.config import ClientConfig
from pipeline.errors import StepwiseError
from pipeline.gateway.config import GATEWAY_PORT

# verdict -> (mark, style); `None` (not checked yet) shows as a dim dot. Only a step the
# verifier read and found implied gets the green check: `consistent` was read and not refuted
# (not implied), and a step with nothing to check (`no_claim`) was not verified at all.
MARKS = {
    "entailed": ("✓", "green"),
    "consistent": ("○", "green"),
    "no_claim": ("–", "dim"),
    "ungrounded": ("⚑", "magenta"),
    "contradicted": ("✗", "bold red"),
    "unknown": ("?", "yellow"),
    "unverified": ("?", "dim"),
}
LEGEND = (
    "✓ entailed  ○ consistent  – nothing to check  ⚑ a number from nowhere  ✗ contradicted  "
    "? unknown"
)
PENDING = ("·", "dim")
DRAFT_CHARS = 160  # the tail of the step being written (stream=tokens) that is shown


@dataclass(slots=True)
class Row:
    """A line of the view: a step (`index` >= 0), a backtrack note (`index` -1), a repair
    note (-2), a tool call (-3) or a cut: text dropped with no contradiction (-4)."""

    index: int
    text: str
    verdict: str | None = None
    gone: bool = False  # discarded by a backtrack or a rewrite
    detail: str = ""
    claims: tuple[schema.ClaimInfo, ...] = ()  # the verifier's claims in `text`, with verdicts


class StreamView:
    """What `stepwise stream` shows: every step with its verdict mark, discarded steps struck
    out, backtracks, the answer, and the Result's budget and stop reason."""

    def __init__(self, title: str = ""):
        self.title = title
        self.job_id = ""
        self.rows: list[Row] = []
        self.live: list[Row] = []  # the current chain, by step index
        self.draft = ""
        self.answer: str | None = None
        self.error: str | None = None
        self.result: schema.Result | None = None
        self.num_events = 0

    def _drop_from(self, index: int) -> None:
        for row in self.live[index:]:
            row.gone = True
        del self.live[index:]

    def apply(self, item: schema.Event | schema.Result) -> None:
        if isinstance(item, schema.Result):
            self.result = item
            self.answer = self.answer if self.answer is not None else item.answer
            if item.error is not None:
                self.error = f"[{item.error.code}] {item.error.message}"
            return
        e = item
        self.job_id, self.num_events = e.id, self.num_events + 1
        if e.kind == "token":
            self.draft += e.text
        elif e.kind == "step" and e.step is not None:
            self._drop_from(e.step)  # a step rewritten in place replaces the old one
            row = Row(e.step, e.text)
            self.rows.append(row)
            self.live.append(row)
            self.draft = ""
        elif e.kind == "verdict" and e.step is not None and e.step < len(self.live):
            self.live[e.step].verdict = e.verdict
            self.live[e.step].detail = e.detail
            self.live[e.step].claims = tuple(e.claims)
        elif e.kind == "backtrack" and e.step is not None:
            # the bad step got its ✗ from a verdict event; steps from `e.step` on are dropped
            self._drop_from(e.step)
            # no verdict: dropped with no contradiction (a forced answer's cut, an early exit)
            n = e.step + 1
            if e.verdict:
                self.rows.append(Row(-1, f"backtrack: again from step {n}", detail=e.detail))
            else:
                self.rows.append(Row(-4, f"dropped from step {n}", detail=e.detail))
            self.draft = ""
        elif e.kind == "repair" and e.step is not None:
            # a value replaced in the step being written: its step event shows the new text
            self.rows.append(Row(-2, f"repaired in step {e.step + 1}: {e.detail}"))
            self.draft = ""
        elif e.kind == "tool_call" and e.tool_call is not None:
            f = e.tool_call.function
            self.rows.append(Row(-3, f"tool call: {f.name}({f.arguments})"))
        elif e.kind == "final":
            self.answer = e.text
            self.draft = ""
        elif e.kind == "error":
            self.error = e.detail or e.text

    @property
    def num_backtracks(self) -> int:
        """Resamples after a contradiction (the Result's `usage.backtracks`); cuts not."""
        return sum(1 for r in self.rows if r.index == -1)

    def _row(self, row: Row) -> Text:
        if row.index == -2:  # a repair
            return Text(f"   ✎ {row.text}", style="cyan")
        if row.index == -3:  # a tool call the model made
            return Text(f"   ⚙ {row.text}", style="magenta")
        if row.index < 0:
            line = Text(f"   ↩ {row.text}", style="yellow")
            if row.detail:
                line.append(f"  ({row.detail})", style="dim yellow")
            return line
        mark, style = MARKS.get(row.verdict or "", PENDING)
        line = Text(f"{row.index + 1:>3}. ")
        line.append_text(marked(row.text, () if row.gone else row.claims, row.gone))
        line.append(f" {mark}", style="dim" if row.gone else style)
        if row.verdict in ("contradicted", "ungrounded") and row.detail and not row.gone:
            line.append(f"  {row.detail}", style=f"dim {style.split()[-1]}")
        return line

    def __rich__(self) -> Group:
        head = Text(self.title or "", style="bold")
        if self.job_id:
            head.append(f"  [{self.job_id}]", style="dim")
        lines: list[Text] = [head] if head.plain.strip() else []
        lines += [self._row(r) for r in self.rows]
        if self.draft.strip() and self.result is None:
            tail = self.draft.strip().replace("\n", " ")[-DRAFT_CHARS:]
            lines.append(Text(f"     … {tail}", style="dim italic"))
        if self.answer is not None:
            lines.append(
                Text.assemble(("Answer: ", "bold"), (self.answer or "(none)", "bold cyan"))
            )
        if self.error:
            lines.append(Text(f"error: {self.error}", style="bold red"))
        v = self.result.verification if self.result is not None else None
        if v is not None and v.status != "off":
            lines.append(Text(coverage_line(v), style="dim"))
        if any(r.verdict for r in self.rows if r.index >= 0):
            lines.append(Text(LEGEND, style="dim"))
        lines.append(self.footer())
        return Group(*lines)

    def footer(self) -> Text:
        r = self.result
        if r is None:
            n = len(self.live)
            return Text(f"thinking … {n} step(s), {self.num_events} event(s)", style="dim")
        b, u = r.budget, r.usage
        style = "green" if r.status in ("ok", "cached") else "red"
        text = Text.assemble((r.status, f"bold {style}"), "  ")
        text.append(
            f"budget {b.used}/{b.max_thinking_tokens} thinking tokens{_set_by(b.binding)} · "
            f"stop_reason {b.stop_reason} · "
            f"{u.steps} steps, {u.backtracks} backtrack{'' if u.backtracks == 1 else 's'}, "
            f"{u.completion_tokens} tokens"
            + (f" · {r.timings.e2e_ms:.0f} ms" if r.timings.e2e_ms is not None else ""),
            style="dim" if r.status in ("ok", "cached") else style,
        )
        return text


def coverage_line(v: schema.VerificationReport) -> str:
    """What verification covered, never "verified" when nothing could be checked."""
    if v.status == "nothing_checkable":
        return "nothing checkable: no step had a claim the verifier could read"
    return (
        f"{v.status}: {v.steps_checkable}/{v.steps} steps checkable · {v.entailed} of {v.claims}"
        f" claims entailed, {v.consistent} consistent, {v.contradicted} contradicted, "
        f"{v.ungrounded} ungrounded, {v.unreadable} unreadable"
    )


def marked(text: str, claims, gone: bool = False) -> Text:
    """A step's text with each claim the verifier read underlined in its verdict's colour and
    its mark after it (claims by their spans; one that overlaps an earlier one is left out).
    Surrounding whitespace is trimmed, the spans shifted with it."""
    lead = len(text) - len(text.lstrip())
    body = text.strip()
    out, at = Text(style="strike dim" if gone else ""), 0
    for c in sorted(claims, key=lambda c: c.span[0]):
        i, j = c.span[0] - lead, c.span[1] - lead
        if i < at or j <= i or j > len(body):
            continue
        mark, style = MARKS.get(c.verdict, PENDING)
        out.append(body[at:i])
        out.append(body[i:j], style=f"underline {style}")
        out.append(f"[{mark}]", style=style)
        at = j
    out.append(body[at:])
    return out


def default_url(source: settings.Settings | None = None) -> str:
    """STEPWISE_GATEWAY_URL, else the local gateway on STEPWISE_GATEWAY_PORT."""
    source = source or settings.current()
    url = settings.build(ClientConfig, source).gateway_url
    return url or f"ws://127.0.0.1:{source[GATEWAY_PORT]}"


def job_from_args(args: argparse.Namespace) -> dict:
    params = {
        "temperature": args.temperature,
        "seed": args.seed,
        "max_tokens": args.max_tokens,
        "verify": args.verify,
        "stream": "tokens" if args.tokens else None,
    }
    job: dict = {
        "prompt": args.problem,
        "params": {k: v for k, v in params.items() if v is not None},
    }
    if args.id:
        job["id"] = args.id
    return job


async def follow(args: argparse.Namespace, view: StreamView, on_item=None) -> schema.Result | None:
    """Stream the job into `view`; the Result, or None if the stream ended without one."""
    args.url = args.url or default_url()
    args.api_key = args.api_key or settings.build(ClientConfig).api_key or None
    client = GatewayClient(args.url, args.api_key)
    if args.job:
        items = client.stream(job_id=args.job, from_seq=args.from_seq)
    else:
        items = client.stream(job_from_args(args))
    async with asyncio.timeout(args.timeout):
        async for item in items:
            view.apply(item)
            if on_item is not None:
                on_item()
    return view.result


def run(args: argparse.Namespace, console: Console | None = None) -> int:
    if not args.problem and not args.job:
        raise StepwiseError("give a problem, or --job ID to follow a job", code="bad_args")
    console = console or Console()
    view = StreamView(args.problem or f"job {args.job}")
    with Live(view, console=console, refresh_per_second=10, transient=False) as live:
        try:
            result = asyncio.run(follow(args, view, live.refresh))
        except TimeoutError:
            raise StepwiseError(f"no Result within {args.timeout:g} s", code="timeout") from None
        except OSError as exc:
            raise StepwiseError(f"cannot reach {args.url}: {exc}", code="unreachable") from None
    return 0 if result is not None and result.status in ("ok", "cached") else 1


def _set_by(binding: str) -> str:
    """The job's deadline cut its thinking (the budget controller): said, since its answer
    was forced early for that."""
    return " (cut by its deadline)" if binding == "deadline" else ""
