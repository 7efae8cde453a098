"""Admission under load: which new jobs a class's shed share refuses (ingest and the gateway
decide alike, so an HTTP client gets its 429 before the job is ever published)."""

from __future__ import annotations

import hashlib

from pipeline import schema
from pipeline.errors import OverloadedError


def admission_draw(job_id: str) -> float:
    """A job's place in [0, 1): a pure function of its id, so a job sent again is decided the
    same way at the same share, and every replica agrees."""
    digest = hashlib.blake2b(job_id.encode(), digest_size=8, person=b"admission").digest()
    return int.from_bytes(digest, "little") / 2.0**64


def check_admission(job_id: str, slo_class: str, live: schema.Budget | None) -> None:
    """Raises OverloadedError when the class's live limits refuse this job."""
    if live is None or live.shed <= 0 or admission_draw(job_id) >= live.shed:
        return
    retry = max(1.0, live.retry_after_s)
    raise OverloadedError(
        f"the {slo_class} class is over capacity: even the smallest thinking budget cannot "
        f"hold its {live.slo_ms / 1000:g} s SLO, so {live.shed:.0%} of new jobs are refused; "
        f"retry after {retry:.0f} s",
        retry_after_s=retry,
        job_id=job_id,
    )
