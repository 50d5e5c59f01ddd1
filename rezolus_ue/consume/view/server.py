"""The dashboard's HTTP server: read-only pages and JSON, from datasets or the live agent.

Routes (GET only; anything else is refused):

* ``/`` redirects to the first page; ``/page/NAME`` is a page (``pages.PAGES``);
* ``/static/FILE``: the vendored uPlot and the page's script and style;
* ``/api/meta``: the pages present, the datasets and their spans, whether live;
* ``/api/page/NAME?ds=a|b&start=S&end=S&since=NS``: a page's chart data (``model``);
* ``/api/events``: live only, server-sent events: one message per publish interval. The
  agent is followed only while at least one such stream is open: with no browser
  connected nothing is subscribed, so the agent's samplers stop as for any consumer.
"""

from __future__ import annotations

import errno
import json
import logging
import socket
import threading
from collections.abc import Sequence
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib import resources
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

from ...errors import ConfigError, RezolusError
from .model import Dataset, Span
from .pages import PAGES, page

log = logging.getLogger("rezolus_ue")

#: The vendored files served under /static/ (nothing else is).
STATIC = resources.files(__package__) / "static"
_TYPES = {".js": "text/javascript", ".css": "text/css", ".md": "text/plain",
          ".LICENSE": "text/plain"}
#: How long a live page's event stream waits for an interval before a keep-alive comment.
KEEPALIVE_S = 15.0
#: How long the follower waits before subscribing again after it could not.
RETRY_S = 5.0


class Follower:
    """Follows the live agent into a dataset while someone listens (``listen``)."""

    def __init__(self, dataset: Dataset, events: Sequence[str]) -> None:
        self.dataset = dataset
        self.events = list(events)
        self.listeners = 0
        #: Intervals added so far; waiters watch it change.
        self.generation = 0
        self.state: str | None = None
        self.subscribed = False
        self._cond = threading.Condition()
        self._stop = False
        self._thread = threading.Thread(target=self._run, name="follow", daemon=True)
        self._thread.start()

    def listen(self, delta: int) -> None:
        """Count a listener in (1) or out (-1)."""
        with self._cond:
            self.listeners += delta
            self._cond.notify_all()

    def wait(self, generation: int, timeout: float) -> int:
        """Return the generation once past ``generation`` (or at the timeout)."""
        with self._cond:
            self._cond.wait_for(lambda: self.generation != generation or self._stop, timeout)
            return self.generation

    def stop(self) -> None:
        with self._cond:
            self._stop = True
            self._cond.notify_all()
        self._thread.join(timeout=5)

    def _run(self) -> None:
        from ..subscription import Subscription

        while True:
            with self._cond:
                self._cond.wait_for(lambda: self.listeners > 0 or self._stop)
                if self._stop:
                    return
            try:
                sub = Subscription(self.events, lazy=True, on_state=self._on_state)
            except RezolusError as e:  # not root, no tracefs: the page says why, and retries
                if self.state != str(e):
                    log.warning("%s", e)
                self._on_state(str(e))
                with self._cond:
                    self._cond.wait_for(lambda: self._stop, RETRY_S)
                continue
            self.subscribed = True
            try:
                while self.listeners > 0 and not self._stop:
                    closed = self.dataset.feed(sub.poll(500, settle_ms=20))
                    self._on_state(sub.state)
                    if closed:
                        with self._cond:
                            self.generation += closed
                            self._cond.notify_all()
            finally:
                sub.close()
                self.subscribed = False
                self.dataset.drop_open()

    def _on_state(self, message: str | None) -> None:
        self.state = message


class View:
    """What the server shows: dataset ``a``, and ``b`` to compare, or a live ``follower``."""

    def __init__(self, a: Dataset, b: Dataset | None = None, *, follower: Follower | None = None,
                 spans: tuple[Span, Span | None] = (Span(), None)) -> None:
        self.a, self.b = a, b
        self.follower = follower
        self.spans = spans

    def meta(self) -> dict[str, object]:
        sets = [d for d in (self.a, self.b) if d is not None]

        def desc(d: Dataset) -> dict[str, object]:
            return {"name": d.name, "span": d.span(), "intervals": len(d.times)}

        span_b = self.spans[1]
        return {
            "live": self.follower is not None,
            "state": self.follower.state if self.follower else None,
            "pages": [{"name": p.name, "title": p.title,
                       "present": self.follower is not None
                       or any(d.present(p) for d in sets)} for p in PAGES],
            "datasets": [desc(d) for d in sets],
            "range": [self.spans[0].start, self.spans[0].end],
            "compare_range": [span_b.start, span_b.end] if span_b is not None else None,
        }


def _page_html(name: str, title: str) -> bytes:
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<title>{title} - rezolus-ue view</title>
<link rel="icon" href="data:,">
<link rel="stylesheet" href="/static/uPlot.min.css">
<link rel="stylesheet" href="/static/view.css">
</head><body data-page="{name}">
<header><nav id="nav"></nav>
<form id="range"><label>from <input id="start" size="8" placeholder="start"></label>
<label>to <input id="end" size="8" placeholder="end"></label>
<label class="cmp"><input type="checkbox" id="compare"> compare with</label>
<span id="brange"><label>from <input id="bstart" size="8"></label>
<label>to <input id="bend" size="8"></label></span>
<button type="submit">show</button> <span id="status"></span></form></header>
<main id="charts"></main>
<script src="/static/uPlot.iife.min.js"></script>
<script src="/static/view.js"></script>
</body></html>
""".encode()


def _span(q: dict[str, list[str]], prefix: str, default: Span | None) -> Span | None:
    start, end = q.get(prefix + "start", [""])[0], q.get(prefix + "end", [""])[0]
    if not start and not end:
        return default
    return Span(float(start) if start else None, float(end) if end else None)


class Handler(BaseHTTPRequestHandler):
    """Serves one request of the read-only dashboard."""

    server: Server
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: object) -> None:
        log.debug("%s " + format, self.address_string(), *args)

    def _send(self, status: int, body: bytes, ctype: str = "application/json",
              extra: dict[str, str] | None = None) -> None:
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        for k, v in (extra or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(body)

    def _json(self, obj: object, status: int = 200) -> None:
        self._send(status, json.dumps(obj, separators=(",", ":")).encode())

    def _refuse(self) -> None:
        self._send(HTTPStatus.METHOD_NOT_ALLOWED, b'{"error":"read-only"}',
                   extra={"Allow": "GET, HEAD"})

    do_POST = do_PUT = do_DELETE = do_PATCH = _refuse

    def do_GET(self) -> None:
        url = urlsplit(self.path)
        parts = [p for p in url.path.split("/") if p]
        q = parse_qs(url.query)
        view = self.server.view
        try:
            if not parts:
                self._send(HTTPStatus.FOUND, b"", "text/plain",
                           {"Location": f"/page/{PAGES[0].name}"})
            elif parts[0] == "page" and len(parts) == 2 and (p := page(parts[1])):
                self._send(200, _page_html(p.name, p.title), "text/html; charset=utf-8")
            elif parts[0] == "static" and len(parts) == 2:
                self._static(parts[1])
            elif parts == ["api", "meta"]:
                self._json(view.meta())
            elif parts[:2] == ["api", "page"] and len(parts) == 3 and (p := page(parts[2])):
                b = q.get("ds", ["a"])[0] == "b"
                ds = view.b if b and view.b is not None else view.a
                default = (view.spans[1] or view.spans[0]) if b else view.spans[0]
                span = _span(q, "", default)
                since = int(q["since"][0]) if "since" in q else None
                self._json(ds.page_data(p, span, since))
            elif parts == ["api", "events"] and view.follower is not None:
                self._events(view.follower)
            else:
                self._send(HTTPStatus.NOT_FOUND, b'{"error":"not found"}')
        except ValueError as e:
            self._json({"error": str(e)}, HTTPStatus.BAD_REQUEST)
        except (BrokenPipeError, ConnectionResetError):
            pass

    def _static(self, name: str) -> None:
        f = STATIC / name
        if "/" in name or name.startswith(".") or not f.is_file():
            self._send(HTTPStatus.NOT_FOUND, b'{"error":"not found"}')
            return
        ctype = _TYPES.get(Path(name).suffix, "application/octet-stream")
        self._send(200, f.read_bytes(), ctype, {"Cache-Control": "max-age=3600"})

    def _events(self, follower: Follower) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-store")
        self.end_headers()
        follower.listen(1)
        try:
            gen = -1
            while not self.server.stopping:
                new = follower.wait(gen, KEEPALIVE_S)
                if new == gen:
                    self.wfile.write(b": keep-alive\n\n")
                else:
                    gen = new
                    msg = {"intervals": gen, "state": follower.state}
                    self.wfile.write(f"data: {json.dumps(msg)}\n\n".encode())
                self.wfile.flush()
        finally:
            follower.listen(-1)
            self.close_connection = True


class Server(ThreadingHTTPServer):
    """The dashboard's server: threads per request, never outliving the command."""

    daemon_threads = True
    stopping = False

    def __init__(self, address: tuple[str, int], view: View) -> None:
        self.view = view
        if ":" in address[0]:
            self.address_family = socket.AF_INET6
        try:
            super().__init__(address, Handler)
        except OSError as e:
            raise ConfigError(_bind_error(address, e)) from None

    def shutdown(self) -> None:
        self.stopping = True
        if self.view.follower is not None:
            self.view.follower.stop()
        super().shutdown()


def _bind_error(address: tuple[str, int], e: OSError) -> str:
    host, port = address
    if e.errno == errno.EADDRINUSE:
        return (f"port {port} on {host} is already in use: choose another with --port, or"
                " stop what listens there")
    if e.errno in (errno.EACCES, errno.EPERM):
        return f"cannot listen on port {port}: ports below 1024 need root"
    if e.errno == errno.EADDRNOTAVAIL or isinstance(e, socket.gaierror):
        return f"cannot listen on {host}: no such local address (see --bind)"
    return f"cannot listen on {host}:{port}: {e.strerror or e}"


def url_of(server: Server) -> str:
    """Return the URL the server answers on."""
    host, port = server.server_address[:2]
    shown = f"[{host}]" if ":" in str(host) else host
    return f"http://{shown}:{port}/"


__all__ = ["Follower", "Server", "View", "url_of"]
