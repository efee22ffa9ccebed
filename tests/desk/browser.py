"""A real headless Chromium, driven over the DevTools protocol (CDP) with ``websockets``.

Why CDP and not Selenium: Debian's chromium speaks CDP itself, so the tests need no driver
process and no new dependency (``websockets`` is already in the dev set), and CDP can switch
the network off (``Network.emulateNetworkConditions``) so a report that reached for any URL
would fail. Never a downloaded browser: ``TRACEVAULT_CHROMIUM`` or /usr/bin/chromium
(dev/system-deps installs it); a missing browser fails loudly, never skips.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from websockets.sync.client import ClientConnection, connect

__all__ = ["Chromium", "artefacts_dir"]


def artefacts_dir() -> Path:
    """Where screenshots go: ``$TRACEVAULT_ARTEFACTS`` or a temp dir (printed by the tests)."""
    root = Path(
        os.environ.get("TRACEVAULT_ARTEFACTS")
        or Path(tempfile.gettempdir()) / "tracevault-artefacts"
    )
    root.mkdir(parents=True, exist_ok=True)
    return root


def _binary() -> str:
    found = os.environ.get("TRACEVAULT_CHROMIUM") or shutil.which("chromium")
    if not found:
        raise RuntimeError("no chromium: install Debian's chromium (dev/system-deps)")
    return found


class Chromium:
    """One headless browser for a test module, one page, offline unless told otherwise."""

    def __init__(self, *, offline: bool = True) -> None:
        self._dir = tempfile.mkdtemp(prefix="tv-chromium-")
        args = [
            _binary(),
            "--headless=new",
            "--no-sandbox",
            "--disable-gpu",
            "--no-first-run",
            "--no-default-browser-check",
            "--disable-extensions",
            "--disable-sync",
            "--disable-background-networking",
            "--no-proxy-server",
            "--remote-debugging-port=0",
            f"--user-data-dir={self._dir}",
            "--window-size=1280,1000",
            "about:blank",
        ]
        if offline:  # nothing resolves: a report that fetched anything would fail
            args.insert(1, "--host-resolver-rules=MAP * ~NOTFOUND")
        self.proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        port_file = Path(self._dir) / "DevToolsActivePort"
        self._wait(
            lambda: port_file.exists() and len(port_file.read_text().split()) >= 2,
            30,
            "chromium to open its DevTools port",
        )
        port = port_file.read_text().split()[0]
        self._ws: ClientConnection = connect(
            f"ws://127.0.0.1:{port}{port_file.read_text().split()[1]}", max_size=None
        )
        self._id = 0
        target = self.call("Target.createTarget", url="about:blank")["targetId"]
        self.session = self.call("Target.attachToTarget", targetId=target, flatten=True)[
            "sessionId"
        ]
        self.call("Page.enable", session=True)
        self.call("Runtime.enable", session=True)
        if offline:
            self.call("Network.enable", session=True)
            self.call(
                "Network.emulateNetworkConditions",
                session=True,
                offline=True,
                latency=0,
                downloadThroughput=-1,
                uploadThroughput=-1,
            )
        self.requests: list[str] = []

    @staticmethod
    def _wait(cond: Callable[[], Any], seconds: float, what: str) -> Any:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            got = cond()
            if got:
                return got
            time.sleep(0.05)
        raise AssertionError(f"timed out waiting for {what}")

    def call(self, method: str, *, session: bool = False, **params: Any) -> dict[str, Any]:
        self._id += 1
        msg: dict[str, Any] = {"id": self._id, "method": method, "params": params}
        if session:
            msg["sessionId"] = self.session
        self._ws.send(json.dumps(msg))
        while True:
            reply = json.loads(self._ws.recv(timeout=60))
            if reply.get("method") == "Network.requestWillBeSent":
                self.requests.append(reply["params"]["request"]["url"])
            if reply.get("id") == self._id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return dict(reply.get("result", {}))

    def open(self, url: str, *, seconds: float = 60) -> None:
        """Go to ``url`` and wait for the new document (after any redirect) to load."""
        self.js("window.__tvOld = true")
        self.call("Page.navigate", session=True, url=url)
        self.wait_loaded(f"{url} to load", seconds)

    def wait_loaded(self, what: str, seconds: float = 60) -> None:
        """Wait until the page marked ``__tvOld`` is replaced by a loaded one."""
        cond = "!window.__tvOld && document.readyState === 'complete'"
        self.wait_for(cond, what=what, seconds=seconds)

    def on_every_load(self, expression: str) -> str:
        """Run ``expression`` in every document this page loads from now on, as soon as it
        is parsed (DOMContentLoaded), before any reload can replace it; returns the id that
        :meth:`forget` takes. Why: a page that reloads itself (the desk's "verifying…" screen)
        may be gone before a test could look at it, so what each load showed is recorded by
        the page itself (in ``sessionStorage``), not by polling it."""
        script = f"addEventListener('DOMContentLoaded', () => {{ {expression}; }});"
        got = self.call("Page.addScriptToEvaluateOnNewDocument", session=True, source=script)
        return str(got["identifier"])

    def forget(self, identifier: str) -> None:
        self.call("Page.removeScriptToEvaluateOnNewDocument", session=True, identifier=identifier)

    def click(self, selector: str) -> None:
        """Click ``selector``, which loads a new page (a link, a form's button), and wait."""
        self.js("window.__tvOld = true")
        self.js(f"document.querySelector({json.dumps(selector)}).click()")
        self.wait_loaded(f"the page after clicking {selector}")

    def js(self, expression: str) -> Any:
        res = self.call(
            "Runtime.evaluate",
            session=True,
            expression=expression,
            returnByValue=True,
            awaitPromise=True,
        )
        if "exceptionDetails" in res:
            raise RuntimeError(f"{expression}: {res['exceptionDetails']}")
        return res["result"].get("value")

    def wait_for(self, expression: str, *, seconds: float = 60, what: str = "") -> Any:
        return self._wait(lambda: self.js(expression), seconds, what or expression)

    def screenshot(self, name: str) -> Path:
        data = self.call(
            "Page.captureScreenshot", session=True, format="png", captureBeyondViewport=False
        )["data"]
        path = artefacts_dir() / f"{name}.png"
        path.write_bytes(base64.b64decode(data))
        print(f"screenshot: {path}")
        return path

    def close(self) -> None:
        try:
            self._ws.close()
        finally:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
            shutil.rmtree(self._dir, ignore_errors=True)
