"""How decode takes a handoff's KV (pure logic, a stand-in importer and engine): a remote read
begins in the background and its job waits only for it, one read at a time, a local import is
never held back; a failed import prefills again and says why."""

from __future__ import annotations

from types import SimpleNamespace

import msgspec

from pipeline.decode.kv_intake import KVIntake
from pipeline.decode.messages import TickStats
from pipeline.transfer import TransferExpiredError
from pipeline.transfer.kv_import import ImportRecord
from tests.unit import test_schema as schema_samples


class FakeImporter:
    def __init__(self, remote: set[str]) -> None:
        self.remote, self.begun, self.done = remote, [], set()
        self.ahead: str | None = None
        self.last: ImportRecord | None = None
        self.fail = False

    @property
    def reading(self) -> str | None:
        return self.ahead

    def is_remote(self, h) -> bool:
        return h.id in self.remote

    def begin(self, h) -> bool:
        if self.ahead is not None:
            return False
        self.ahead = h.id
        self.begun.append(h.id)
        return True

    def forget(self, job_id: str) -> None:
        if self.ahead == job_id:
            self.ahead = None

    def ready(self, job_id: str) -> bool:
        return job_id == self.ahead and job_id in self.done

    def import_kv(self, engine, h, params):
        transport = "mooncake" if h.id in self.remote else "shm_pool"
        self.last = ImportRecord(transport, h.kv.nbytes, ms=12.5)
        if self.ahead == h.id:
            self.ahead = None
        if self.fail:
            self.last.error = "transfer_timeout"
            raise TransferExpiredError("too late")
        return SimpleNamespace(request_id=h.id)


def engine():
    return SimpleNamespace(can_export_kv=True, add=lambda req: SimpleNamespace(request_id="re"))


def handoff(job_id: str):
    return msgspec.structs.replace(schema_samples.handoff(), id=job_id)


def test_remote_reads_go_one_at_a_time_and_local_imports_never_wait():
    importer = FakeImporter(remote={"a", "b"})
    intake = KVIntake(engine(), importer)  # type: ignore[arg-type]
    a, b, local = handoff("a"), handoff("b"), handoff("local")
    assert intake.reads_ahead(a)  # begun now, a waits for it
    assert intake.reads_ahead(b) and importer.begun == ["a"]  # b waits behind a's read
    assert not intake.can_start(a) and not intake.can_start(b)
    assert not intake.reads_ahead(local) and intake.can_start(local)  # never held back
    importer.done.add("a")
    assert intake.can_start(a) and not intake.reads_ahead(a)  # done: a starts
    seq, ack, kv = intake.take(a, None, TickStats())  # type: ignore[arg-type]
    assert (kv.transport, kv.outcome, kv.ms) == ("mooncake", "imported", 12.5)
    assert ack == (a.kv.owner, a.kv.handle) and intake.reading is None
    assert intake.can_start(b) and intake.reads_ahead(b) and importer.begun == ["a", "b"]


def test_a_failed_import_prefills_again_and_says_why():
    importer = FakeImporter(remote={"a"})
    importer.fail = True
    intake, stats = KVIntake(engine(), importer), TickStats()  # type: ignore[arg-type]
    seq, ack, kv = intake.take(handoff("a"), None, stats)  # type: ignore[arg-type]
    assert seq.request_id == "re" and ack is None  # the prompt, prefilled again
    assert (kv.outcome, kv.transport) == ("reprefill", "mooncake")
    assert kv.reason.startswith("transfer_expired") and "too late" in kv.reason
    assert intake.num_reprefills == 1 and stats.kv_imports == [("mooncake", "reprefill", 0.0125)]
    no_kv = msgspec.structs.replace(handoff("b"), kv=None)
    assert intake.take(no_kv, None, stats)[2].transport == "none"  # type: ignore[arg-type]
    assert intake.num_reprefills == 2


def test_a_job_that_fails_to_start_lets_go_of_its_read():
    importer = FakeImporter(remote={"a", "b"})
    intake = KVIntake(engine(), importer)  # type: ignore[arg-type]
    a, b = handoff("a"), handoff("b")
    assert intake.reads_ahead(a) and intake.reads_ahead(b)  # b waits behind a's read
    intake.forget(b)  # not the one being read: nothing changes
    assert intake.reading == "a"
    intake.forget(a)  # a's start failed before its import: b must not wait for it forever
    assert intake.reading is None
    assert intake.reads_ahead(b) and importer.begun == ["a", "b"]
