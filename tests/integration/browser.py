"""Headless Chromium (Debian's `chromium` package) driven over the DevTools protocol: one
WebSocket, no driver binary, no browser download. Enough for the live page's browser test:
open a page, evaluate JavaScript, wait for a condition, take a screenshot."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import itertools
import json
import shutil
import tempfile
from pathlib import Path

import websockets

FLAGS = (
    "--headless",
    "--no-sandbox",  # we run as root
    "--disable-gpu",
    "--disable-quic",
    "--disable-dev-shm-usage",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--remote-debugging-port=0",  # Chromium picks a port and writes it to DevToolsActivePort
)


def find_chromium() -> str:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name)
        if path:
            return path
    raise RuntimeError("no chromium on PATH: scripts/setup.sh installs Debian's `chromium`")


class JsError(RuntimeError):
    pass


class Browser:
    """One headless Chromium with one page; use `async with Browser() as page:`."""

    def __init__(self, width: int = 900, height: int = 640):
        self.size = (width, height)
        self.proc: asyncio.subprocess.Process | None = None
        self.profile = Path(tempfile.mkdtemp(prefix="stepwise-chromium-"))
        self.ws = None
        self.session: str | None = None
        self._ids = itertools.count(1)
        self._waiting: dict[int, asyncio.Future] = {}
        self._reader: asyncio.Task | None = None
        self.errors: list[str] = []  # uncaught page exceptions, for failure messages

    async def __aenter__(self) -> Browser:
        log = open(self.profile / "chromium.log", "wb")  # noqa: SIM115 (lives with the child)
        self.proc = await asyncio.create_subprocess_exec(
            find_chromium(), *FLAGS, f"--user-data-dir={self.profile}", "about:blank",
            stdout=log, stderr=log,
        )  # fmt: skip
        log.close()
        port_file = self.profile / "DevToolsActivePort"
        for _ in range(300):  # up to 30 s on a busy machine
            if port_file.exists() and len(port_file.read_text().split()) >= 2:
                break
            if self.proc.returncode is not None:
                break
            await asyncio.sleep(0.1)
        else:
            raise RuntimeError(f"chromium did not start: {self.log_tail()}")
        if self.proc.returncode is not None:
            raise RuntimeError(f"chromium exited {self.proc.returncode}: {self.log_tail()}")
        port, path = port_file.read_text().split()[:2]
        self.ws = await websockets.connect(f"ws://127.0.0.1:{port}{path}", max_size=2**26)
        self._reader = asyncio.create_task(self._read())
        target = await self.call("Target.createTarget", url="about:blank")
        attached = await self.call(
            "Target.attachToTarget", targetId=target["targetId"], flatten=True
        )
        self.session = attached["sessionId"]
        await self.call("Runtime.enable")
        await self.call("Page.enable")
        width, height = self.size
        await self.call(
            "Emulation.setDeviceMetricsOverride",
            width=width, height=height, deviceScaleFactor=1, mobile=False,
        )  # fmt: skip
        return self

    async def __aexit__(self, *exc) -> None:
        if self._reader is not None:
            self._reader.cancel()
        if self.ws is not None:
            with contextlib.suppress(Exception):
                await self.ws.close()
        if self.proc is not None and self.proc.returncode is None:
            self.proc.terminate()
            try:
                await asyncio.wait_for(self.proc.wait(), 10)
            except TimeoutError:
                self.proc.kill()
                await self.proc.wait()
        shutil.rmtree(self.profile, ignore_errors=True)

    def log_tail(self, n: int = 2000) -> str:
        with contextlib.suppress(OSError):
            return (self.profile / "chromium.log").read_text(errors="replace")[-n:]
        return ""

    async def _read(self) -> None:
        async for raw in self.ws:
            msg = json.loads(raw)
            fut = self._waiting.pop(msg.get("id", -1), None)
            if fut is not None and not fut.done():
                fut.set_result(msg)
            elif msg.get("method") == "Runtime.exceptionThrown":
                details = msg["params"]["exceptionDetails"]
                self.errors.append(details.get("exception", {}).get("description", str(details)))

    async def call(self, method: str, **params) -> dict:
        msg_id = next(self._ids)
        msg = {"id": msg_id, "method": method, "params": params}
        if self.session is not None:
            msg["sessionId"] = self.session
        fut = asyncio.get_running_loop().create_future()
        self._waiting[msg_id] = fut
        await self.ws.send(json.dumps(msg))
        reply = await asyncio.wait_for(fut, 30)
        if "error" in reply:
            raise RuntimeError(f"{method}: {reply['error']}")
        return reply["result"]

    async def eval(self, expression: str):
        """The value of a JavaScript expression (JSON-able), evaluated in the page."""
        got = await self.call("Runtime.evaluate", expression=expression, returnByValue=True)
        if "exceptionDetails" in got:
            raise JsError(got["exceptionDetails"].get("text", "") + f" in {expression!r}")
        return got["result"].get("value")

    async def goto(self, url: str, timeout_s: float = 30) -> None:
        await self.call("Page.navigate", url=url)
        await self.wait_for("document.readyState === 'complete'", timeout_s)

    async def wait_for(self, expression: str, timeout_s: float, poll_s: float = 0.2):
        """Poll until `expression` is truthy; its value. TimeoutError says what the page held."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while True:
            value = await self.eval(expression)
            if value:
                return value
            if loop.time() > deadline:
                body = await self.eval("document.body ? document.body.innerText : ''")
                raise TimeoutError(f"{expression!r} not true in {timeout_s} s; page: {body!r}")
            await asyncio.sleep(poll_s)

    async def screenshot(self, path: Path) -> Path:
        shot = await self.call("Page.captureScreenshot", format="png")
        path.write_bytes(base64.b64decode(shot["data"]))
        return path
