"""A vLLM OpenAI server process, and a streaming client for its `/v1/completions`.

vLLM runs beside Stepwise, not inside it (docs/vllm.md says why): its own interpreter
(`.venv-vllm` with `vllm-cpu`, or any env with `vllm`), started here or by the operator and
named by `STEPWISE_VLLM_URL`. The client is stdlib asyncio on a thread of its own: each step of
each sequence is one streamed completion (token ids in, token ids out), and closing a stream
is how a step is abandoned (vLLM aborts a request whose client went away).
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import json
import os
import queue
import shutil
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

from pipeline.config import runtime
from pipeline.errors import StepwiseError

ROOT = Path(__file__).resolve().parents[2]


class VLLMError(StepwiseError):
    code = "vllm_error"


def vllm_python() -> str:
    """An interpreter that imports vllm: STEPWISE_VLLM_PYTHON, the repo's .venv-vllm, else this
    one (a GPU env with `vllm` installed beside Stepwise)."""
    if found := runtime().vllm_python:
        return found
    venv = ROOT / ".venv-vllm" / "bin" / "python"
    return str(venv) if venv.exists() else sys.executable


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass(slots=True)
class VLLMServerConfig:
    """How to start `python -m vllm.entrypoints.openai.api_server` (`vllm serve` is broken in
    vllm-cpu)."""

    model: str
    dtype: str = "float32"
    # vLLM's CPU default is 128 tokens a block; step-wise prefix hits want small ones, and the
    # CPU attention backend takes multiples of 32 only.
    block_size: int = 32
    max_model_len: int | None = None
    max_num_seqs: int = 64
    kv_cache_gb: int = 1  # VLLM_CPU_KVCACHE_SPACE (CPU); GPUs use gpu_memory_utilization
    port: int = 0  # 0: a free one
    seed: int = 0
    num_threads: int | None = None  # OMP threads of the model (CPU); None: inherit the env's
    python: str = field(default_factory=vllm_python)
    extra_args: tuple[str, ...] = ()
    startup_timeout_s: float = 600.0
    # Structured output (json_schema answers, forced tool calls) passed through: vLLM's masks
    # need its tokenizer, and the guidance backend reads the schemas as the native engine's
    # llguidance does. False: token ids in and out with no tokenizer at all (the benches).
    structured_outputs: bool = False

    def command(self, port: int) -> list[str]:
        cmd = [
            self.python, "-m", "vllm.entrypoints.openai.api_server",
            "--model", self.model, "--served-model-name", "stepwise",
            "--dtype", self.dtype, "--block-size", str(self.block_size),
            "--enable-prefix-caching", "--max-num-seqs", str(self.max_num_seqs),
            "--seed", str(self.seed), "--host", "127.0.0.1", "--port", str(port),
            "--enforce-eager", "--disable-uvicorn-access-log",
        ]  # fmt: skip
        if self.structured_outputs:
            cmd += ["--structured-outputs-config", '{"backend": "guidance"}']
        else:  # token ids in and out: Stepwise tokenizes, so vLLM needs no tokenizer
            cmd += ["--skip-tokenizer-init"]
        if self.max_model_len:
            cmd += ["--max-model-len", str(self.max_model_len)]
        return cmd + list(self.extra_args)


class VLLMServer:
    """A vLLM server subprocess: `start()` returns once it answers, `stop()` ends it."""

    def __init__(self, config: VLLMServerConfig, log_path: str | Path | None = None) -> None:
        self.config = config
        self.log_path = Path(log_path) if log_path else None
        self.proc: subprocess.Popen | None = None
        self.url = ""
        self.startup_s = 0.0
        self._t0 = 0.0

    def start(self) -> VLLMServer:
        return self.launch().wait_ready()

    def launch(self) -> VLLMServer:
        """Start the process and return at once (`wait_ready` waits for it): two servers can
        load side by side. vLLM is set up first where it is missing (ensure_vllm)."""
        c = self.config
        if c.python == vllm_python():  # the default interpreter (not one named for this server)
            ensure_vllm()
            c.python = vllm_python()  # .venv-vllm, when it was just built
        port = c.port or _free_port()
        env = {
            **os.environ,
            "HF_HUB_OFFLINE": "1",
            "TRANSFORMERS_OFFLINE": "1",
            "VLLM_CPU_KVCACHE_SPACE": os.environ.get("VLLM_CPU_KVCACHE_SPACE", str(c.kv_cache_gb)),
            # vLLM's `auto` keeps a core for itself; on a 2-core box that halves the model's.
            "VLLM_CPU_OMP_THREADS_BIND": os.environ.get("VLLM_CPU_OMP_THREADS_BIND", "nobind"),
            "VLLM_CACHE_ROOT": os.environ.get("VLLM_CACHE_ROOT", str(ROOT / ".cache" / "vllm")),
            "VLLM_NO_USAGE_STATS": "1",
        }
        if c.num_threads:
            env["OMP_NUM_THREADS"] = str(c.num_threads)
        if self.log_path is not None:
            self.log_path.parent.mkdir(parents=True, exist_ok=True)
        out = open(self.log_path, "ab") if self.log_path else subprocess.DEVNULL  # noqa: SIM115
        self._t0 = time.perf_counter()
        self.proc = subprocess.Popen(
            c.command(port), env=env, stdout=out, stderr=subprocess.STDOUT,
            start_new_session=True,  # its engine-core child goes with it on stop()
        )  # fmt: skip
        self.url = f"http://127.0.0.1:{port}"
        return self

    def wait_ready(self) -> VLLMServer:
        """Return once the launched server answers; stop it and raise if it cannot."""
        c = self.config
        assert self.proc is not None, "launch() first"
        deadline = time.monotonic() + c.startup_timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise VLLMError(
                    f"the vLLM server exited with {self.proc.returncode} while starting"
                    + (f"; see {self.log_path}" if self.log_path else "")
                )
            if is_healthy(self.url):
                self.startup_s = time.perf_counter() - self._t0
                return self
            time.sleep(0.5)
        self.stop()
        raise VLLMError(f"the vLLM server did not answer within {c.startup_timeout_s:.0f} s")

    def stop(self) -> None:
        proc, self.proc = self.proc, None
        if proc is None or proc.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, 15)
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, 9)
            proc.wait(10)

    def __enter__(self) -> VLLMServer:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def is_healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/health", timeout=2) as r:
            return r.status == 200
    except OSError:
        return False


def served_model(url: str) -> tuple[str, int]:
    """(served model name, its max_model_len) of the server at `url`."""
    try:
        with urllib.request.urlopen(f"{url}/v1/models", timeout=10) as r:
            first = json.loads(r.read())["data"][0]
    except (OSError, KeyError, IndexError, ValueError) as e:
        raise VLLMError(f"no vLLM server answers at {url}: {e}") from e
    return first["id"], int(first.get("max_model_len") or 0)


def vllm_installed() -> bool:
    """Whether a vLLM interpreter is there to start (tests skip without one)."""
    py = vllm_python()
    if py == sys.executable:
        return importlib.util.find_spec("vllm") is not None
    return shutil.which(py) is not None or Path(py).exists()


SETUP_SCRIPT = ROOT / "tools" / "setup_vllm_cpu.sh"


def ensure_vllm(run: Callable[..., object] = subprocess.run) -> None:
    """vLLM set up on first use: `--engine vllm` in a checkout without .venv-vllm builds it
    (tools/setup_vllm_cpu.sh; about 2.5 GB of packages, a few minutes) instead of failing,
    so the demo and `scripts/setup.sh` need not build it for everyone. Nothing to do where an
    interpreter with vLLM is named (STEPWISE_VLLM_PYTHON) or found."""
    if vllm_installed():
        return
    if runtime().vllm_python or not SETUP_SCRIPT.exists():
        raise VLLMError(
            f"no vLLM at {vllm_python()}: install vllm there, or run {SETUP_SCRIPT.name} "
            "(STEPWISE_VLLM_PYTHON names the interpreter)"
        )
    print("[stepwise] vLLM is not set up here: building .venv-vllm (first use; about 2.5 GB "
          "of packages, a few minutes) ...", file=sys.stderr, flush=True)  # fmt: skip
    try:
        run([str(SETUP_SCRIPT)], check=True)
    except (OSError, subprocess.CalledProcessError) as e:
        raise VLLMError(f"setting up vLLM failed ({e}); see the output above") from e
    if not vllm_installed():
        raise VLLMError(f"{SETUP_SCRIPT.name} ran but no vLLM interpreter is there")


# -- the client ---------------------------------------------------------------------------


@dataclass(slots=True)
class Delta:
    """New tokens of one streamed completion (a step); `done` on its last chunk."""

    sub_id: str
    token_ids: list[int]
    logprobs: list[float]
    finish_reason: str | None = None
    done: bool = False
    error: str | None = None


class CompletionStreams:
    """Streamed completions on a background event loop; what arrives is read with `poll`."""

    def __init__(self, url: str) -> None:
        parts = urlsplit(url)
        self.host, self.port = parts.hostname or "127.0.0.1", parts.port or 80
        self.deltas: queue.SimpleQueue[Delta] = queue.SimpleQueue()
        self.loop = asyncio.new_event_loop()
        self.tasks: dict[str, asyncio.Task] = {}  # event loop only
        self.thread = threading.Thread(target=self.loop.run_forever, name="vllm-http", daemon=True)
        self.thread.start()

    def submit(self, sub_id: str, body: dict) -> None:
        self.loop.call_soon_threadsafe(self._start, sub_id, body)

    def cancel(self, sub_id: str) -> None:
        self.loop.call_soon_threadsafe(self._cancel, sub_id)

    def poll(self, timeout: float) -> list[Delta]:
        """What arrived; waits up to `timeout` for the first delta if none is there yet."""
        out: list[Delta] = []
        try:
            out.append(
                self.deltas.get(timeout=timeout) if timeout > 0 else self.deltas.get_nowait()
            )
        except queue.Empty:
            return out
        while True:
            try:
                out.append(self.deltas.get_nowait())
            except queue.Empty:
                return out

    def close(self) -> None:
        if self.loop.is_closed():
            return

        async def shutdown() -> None:
            for t in list(self.tasks.values()):
                t.cancel()
            await asyncio.gather(*self.tasks.values(), return_exceptions=True)

        with contextlib.suppress(Exception):
            asyncio.run_coroutine_threadsafe(shutdown(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        self.loop.close()

    # -- event loop side --------------------------------------------------------------------

    def _start(self, sub_id: str, body: dict) -> None:
        task = self.loop.create_task(self._stream(sub_id, body))
        self.tasks[sub_id] = task
        task.add_done_callback(lambda _: self.tasks.pop(sub_id, None))

    def _cancel(self, sub_id: str) -> None:
        if (task := self.tasks.pop(sub_id, None)) is not None:
            task.cancel()

    async def _stream(self, sub_id: str, body: dict) -> None:
        try:
            await self._request(sub_id, body)
        except asyncio.CancelledError:
            raise
        except Exception as e:  # the server went away, or answered nonsense
            self.deltas.put(Delta(sub_id, [], [], done=True, error=repr(e)))

    async def _request(self, sub_id: str, body: dict) -> None:
        reader, writer = await asyncio.open_connection(self.host, self.port)
        try:
            payload = json.dumps(body).encode()
            writer.write(
                b"POST /v1/completions HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\n"
                b"Content-Length: %d\r\nConnection: close\r\n\r\n%s"
                % (self.host.encode(), len(payload), payload)
            )
            status = (await reader.readline()).split(b" ", 2)
            headers = {}
            while (line := await reader.readline()) not in (b"\r\n", b""):
                name, _, value = line.decode("latin-1").partition(":")
                headers[name.strip().lower()] = value.strip().lower()
            chunked = headers.get("transfer-encoding") == "chunked"
            buf = b""
            async for data in _body(reader, chunked):
                buf += data
                while b"\n\n" in buf:
                    event, buf = buf.split(b"\n\n", 1)
                    if self._event(sub_id, event, int(status[1])):
                        return
            if len(status) < 2 or status[1] != b"200":
                raise VLLMError(f"HTTP {status[1:]}: {buf[:300]!r}")
            raise VLLMError("the stream ended without [DONE]")
        finally:
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    def _event(self, sub_id: str, event: bytes, status: int) -> bool:
        """Queue one SSE event's tokens; True at the end of the stream."""
        data = event.removeprefix(b"data: ").strip()
        if data == b"[DONE]":
            return True
        if status != 200:
            raise VLLMError(f"HTTP {status}: {data[:300]!r}")
        msg = json.loads(data)
        if "error" in msg:
            raise VLLMError(str(msg["error"].get("message", msg["error"]))[:300])
        choice = msg["choices"][0]
        ids = list(choice.get("token_ids") or ())
        lps = (choice.get("logprobs") or {}).get("token_logprobs") or [0.0] * len(ids)
        finish = choice.get("finish_reason")
        self.deltas.put(Delta(sub_id, ids, list(lps), finish, done=finish is not None))
        return False


async def _body(reader: asyncio.StreamReader, chunked: bool):
    """The response body in pieces, chunked transfer-encoding undone."""
    if not chunked:
        while data := await reader.read(65536):
            yield data
        return
    while True:
        size = int((await reader.readline()).split(b";")[0].strip() or b"0", 16)
        if size == 0:
            return
        yield await reader.readexactly(size)
        await reader.readline()
