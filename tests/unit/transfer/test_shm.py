"""Shared-memory KV handoff between two processes, through two real engines."""

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from dataclasses import asdict

import pytest
import torch

from pipeline.engine import Engine, EngineConfig, Request, SamplingParams
from pipeline.transfer.base import ExportPool, KVHandle, TransferExpiredError
from pipeline.transfer.shm import ShmTransport
from tests.unit.transfer.importer import REPORT, run_importer

PARAMS = SamplingParams(temperature=0.8, seed=77, max_tokens=24, ignore_eos=True)

IMPORTER = (
    textwrap.dedent(
        """
    import json, sys
    from pipeline.engine import Engine, EngineConfig, KVExport, SamplingParams
    from pipeline.transfer.base import KVHandle
    from pipeline.transfer.shm import ShmTransport
    msg = json.loads(sys.stdin.read())
    handle = KVHandle(**{**msg["handle"], "shape": tuple(msg["handle"]["shape"])})
    engine = Engine(EngineConfig(model=msg["model"], dtype="float32", num_kv_blocks=64))
    with ShmTransport().attach(handle) as kv:
        kv = kv[:, :, :, : msg["num_kv_tokens"]]  # the buffer holds whole blocks
        export = KVExport("r", msg["token_ids"], msg["num_prompt_tokens"], kv, msg["seed"])
        seq = engine.import_kv(export, SamplingParams(**msg["params"]))
    """
    )
    + REPORT
)


def engine(path):
    return Engine(EngineConfig(model=str(path), dtype="float32", num_kv_blocks=64))


def test_kv_crosses_processes_through_shm_and_decoding_continues_exactly(llama_dir):
    ids = torch.randint(0, 320, (21,), generator=torch.Generator().manual_seed(5)).tolist()
    expected = engine(llama_dir).generate([ids], PARAMS)[0].token_ids

    src = engine(llama_dir)
    seq = src.add(Request("r", ids, PARAMS))
    while seq.num_output_tokens < 1:  # prefill + first token, as a prefill worker does
        src.step()
    pool = ExportPool(ShmTransport(), "prefill-0", max_bytes=1 << 24)
    handle, buf = pool.export(src.export_shape("r"), torch.float32)
    src.export_kv("r", out=buf)  # gathered straight into shared memory
    msg = {
        "model": str(llama_dir),
        "handle": asdict(handle),
        "token_ids": seq.token_ids,
        "num_prompt_tokens": seq.num_prompt_tokens,
        "num_kv_tokens": seq.num_computed_tokens,
        "seed": seq.seed,
        "params": {"temperature": 0.8, "seed": 77, "max_tokens": 24, "ignore_eos": True},
    }
    result = run_importer(IMPORTER, msg)
    assert result["tokens"] == expected
    assert result["recomputed"] == 0
    assert pool.ack(handle.handle) and pool.used_bytes == 0


def test_attaching_a_released_segment_says_expired():
    pool = ExportPool(ShmTransport(), "w", max_bytes=1 << 20)
    handle, buf = pool.export((1, 2, 1, 4, 8), torch.float32)
    buf.fill_(1.0)
    with ShmTransport().attach(handle) as kv:
        assert float(kv.sum()) == 64.0
    pool.ack(handle.handle)
    with pytest.raises(TransferExpiredError), ShmTransport().attach(handle):
        pass


def test_segments_of_a_killed_exporter_are_cleaned_up(tmp_path):
    code = textwrap.dedent(
        """
        import json, time, torch
        from dataclasses import asdict
        from pipeline.transfer.base import ExportPool
        from pipeline.transfer.shm import ShmTransport
        pool = ExportPool(ShmTransport(), "doomed", max_bytes=1 << 20)
        handle, buf = pool.export((1, 2, 1, 4, 8), torch.float32)
        print(json.dumps(asdict(handle)), flush=True)
        time.sleep(60)
        """
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", code],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": os.getcwd()},
    )
    try:
        raw = json.loads(proc.stdout.readline())
        handle = KVHandle(**{**raw, "shape": tuple(raw["shape"])})
        with ShmTransport().attach(handle) as kv:
            assert kv.shape == (1, 2, 1, 4, 8)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
    # Python's resource tracker outlives the SIGKILLed exporter and unlinks its segments.
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            with ShmTransport().attach(handle):
                pass
        except TransferExpiredError:
            return
        time.sleep(0.05)
    pytest.fail("the dead exporter's segment was never unlinked")
