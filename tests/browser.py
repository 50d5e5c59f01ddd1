"""A headless chromium driven by its DevTools protocol, for tests of web pages.

``Browser()`` starts ``chromium --headless`` on a private profile; ``browser.page()`` opens
a tab whose console errors, uncaught exceptions and failed loads are collected in
``errors``; ``evaluate`` runs JavaScript (awaiting promises) and ``screenshot`` saves a
PNG of the whole page. Needs ``websocket-client`` (the dev extra) and Debian's chromium.
"""

from __future__ import annotations

import base64
import itertools
import json
import os
import shutil
import subprocess
import tempfile
import urllib.request
from pathlib import Path
from typing import Any

from waiting import scaled, wait_for

#: The browsers looked for, in order.
CHROMIUM = ("chromium", "chromium-browser", "google-chrome")


def find_chromium() -> str | None:
    """Return the path of a chromium on PATH, or None."""
    return next((p for n in CHROMIUM if (p := shutil.which(n))), None)


class Page:
    """One tab, over its own DevTools websocket."""

    def __init__(self, ws_url: str) -> None:
        import websocket

        self._ws = websocket.create_connection(ws_url, timeout=scaled(60),
                                               suppress_origin=True)
        self._ids = itertools.count(1)
        #: Console errors, uncaught exceptions and failed requests, as text.
        self.errors: list[str] = []
        for domain in ("Runtime", "Log", "Page", "Network"):
            self.call(f"{domain}.enable")

    def _event(self, msg: dict[str, Any]) -> None:
        method, p = msg.get("method"), msg.get("params", {})
        if method == "Runtime.consoleAPICalled" and p.get("type") in ("error", "assert"):
            self.errors.append("console: " + " ".join(
                str(a.get("value", a.get("description", ""))) for a in p.get("args", [])))
        elif method == "Runtime.exceptionThrown":
            d = p.get("exceptionDetails", {})
            self.errors.append("exception: " + str(
                d.get("exception", {}).get("description") or d.get("text")))
        elif method == "Log.entryAdded" and p.get("entry", {}).get("level") == "error":
            e = p["entry"]
            self.errors.append(f"log: {e.get('text')} {e.get('url', '')}")
        elif method == "Network.loadingFailed" and not p.get("canceled"):
            self.errors.append(f"load failed: {p.get('errorText')}")

    def call(self, method: str, **params: object) -> dict[str, Any]:
        """Send a command; return its result (events meanwhile are collected)."""
        i = next(self._ids)
        self._ws.send(json.dumps({"id": i, "method": method, "params": params}))
        while True:
            msg = json.loads(self._ws.recv())
            if msg.get("id") == i:
                if "error" in msg:
                    raise RuntimeError(f"{method}: {msg['error']}")
                return msg.get("result", {})
            self._event(msg)

    def pump(self) -> None:
        """Collect the events that arrived (a no-op command)."""
        self.call("Runtime.evaluate", expression="0")

    def goto(self, url: str) -> None:
        """Load ``url`` and wait for its load event."""
        self.call("Page.navigate", url=url)
        wait_for(lambda: self.evaluate("document.readyState") == "complete", timeout=30,
                 what=f"{url} to load")

    def evaluate(self, expression: str) -> Any:
        """Return the value of a JavaScript expression (a promise's, awaited)."""
        r = self.call("Runtime.evaluate", expression=expression, returnByValue=True,
                      awaitPromise=True)
        if "exceptionDetails" in r:
            raise RuntimeError(f"{expression}: {r['exceptionDetails']}")
        return r.get("result", {}).get("value")

    def screenshot(self, path: Path) -> None:
        """Save a PNG of the whole page (beyond the viewport) at ``path``."""
        h = self.evaluate("document.documentElement.scrollHeight")
        self.call("Emulation.setDeviceMetricsOverride", width=1280, height=int(h or 800),
                  deviceScaleFactor=1, mobile=False)
        r = self.call("Page.captureScreenshot", format="png", captureBeyondViewport=True)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(base64.b64decode(r["data"]))
        self.call("Emulation.clearDeviceMetricsOverride")

    def close(self) -> None:
        self._ws.close()


class Browser:
    """A headless chromium on a throw-away profile, closed by ``close``."""

    def __init__(self, binary: str, width: int = 1280, height: int = 900) -> None:
        self._dir = tempfile.TemporaryDirectory(prefix="rezolus-chromium-")
        profile = Path(self._dir.name)
        args = [binary, "--headless", "--no-sandbox", "--disable-gpu",
                "--no-first-run", "--no-default-browser-check", "--disable-extensions",
                "--disable-dev-shm-usage", f"--window-size={width},{height}",
                "--remote-debugging-port=0", "--remote-allow-origins=*",
                f"--user-data-dir={profile}", "about:blank"]
        self.log = open(profile / "chromium.log", "w+b")  # noqa: SIM115
        self.proc = subprocess.Popen(args, stdout=self.log, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL, start_new_session=True)
        port_file = profile / "DevToolsActivePort"
        wait_for(lambda: port_file.exists() and port_file.read_text().strip(), timeout=60,
                 what="chromium's DevTools port", log=self._log)
        self.port = int(port_file.read_text().split()[0])
        self._pages: list[Page] = []

    def _log(self) -> str:
        self.log.seek(0)
        return self.log.read().decode(errors="replace")

    def page(self) -> Page:
        """Return a new tab."""
        req = urllib.request.Request(f"http://127.0.0.1:{self.port}/json/new?about:blank",
                                     method="PUT")
        with urllib.request.urlopen(req, timeout=scaled(30)) as r:
            target = json.load(r)
        page = Page(target["webSocketDebuggerUrl"])
        self._pages.append(page)
        return page

    def close(self) -> None:
        for p in self._pages:
            p.close()
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, 15)
            try:
                self.proc.wait(timeout=scaled(10))
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, 9)
                self.proc.wait()
        self.log.close()
        self._dir.cleanup()

    def __enter__(self) -> Browser:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
