"""`stepwise worker verify` starts its Celery worker again when it exits on an error (kombu's
"Unrecoverable error" after a Redis restart), and stops when it shuts down cleanly (issue 24)."""

from __future__ import annotations

from celery.signals import worker_shutdown

from pipeline.verify import worker as verify_worker


class FakeApp:
    """worker_main runs a 'worker' that shuts down with the next exit code in `codes`."""

    def __init__(self, codes: list[int]) -> None:
        self.codes, self.runs = list(codes), 0

    def worker_main(self, argv: list[str]) -> None:
        self.runs += 1
        worker = type("Worker", (), {"exitcode": self.codes.pop(0)})()
        worker_shutdown.send(sender=worker)  # as WorkController.stop does


def test_a_worker_that_fails_is_started_again_until_it_stops_cleanly(monkeypatch, caplog):
    monkeypatch.setattr(verify_worker, "RESTART_DELAY_S", (0.0, 0.0))
    app = FakeApp([1, 1, 0])
    assert verify_worker.run_worker(app, ["worker"]) == 0  # type: ignore[arg-type]
    assert app.runs == 3
    assert caplog.text.count("starting it again") == 2


def test_restarts_can_be_bounded(monkeypatch):
    monkeypatch.setattr(verify_worker, "RESTART_DELAY_S", (0.0, 0.0))
    app = FakeApp([1, 1, 1, 1])
    assert verify_worker.run_worker(app, ["worker"], restarts=1) == 1  # type: ignore[arg-type]
    assert app.runs == 2


def test_a_clean_shutdown_is_not_restarted():
    app = FakeApp([0])
    assert verify_worker.run_worker(app, ["worker"]) == 0  # type: ignore[arg-type]
    assert app.runs == 1
