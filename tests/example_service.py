"""The example service of docs/applications.md, run as written for the tests that watch it
(on either transport): its exporter's counters land in a status file, so a test waits on
what the service did instead of sleeping."""

from __future__ import annotations

import contextlib
import json
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

from waiting import running, scaled

APP = Path(__file__).resolve().parent / "fixtures" / "docs_example_app.py"
NOBODY = 65534


class Service:
    """The docs' example service (as ``user``, if given), its counters in a status file."""

    def __init__(self, user: int | None = None) -> None:
        # A directory the user can write its status into (tmp_path's parents are 0700).
        self.dir = Path(tempfile.mkdtemp(prefix="otel-app-"))
        self.dir.chmod(0o777)
        self.status = self.dir / "status.json"
        self.log = self.dir / "app.log"
        prefix = [] if user is None else ["setpriv", f"--reuid={user}", f"--regid={user}",
                                          "--clear-groups"]
        with self.log.open("w") as out:
            self.proc = subprocess.Popen([*prefix, sys.executable, str(APP), str(self.status)],
                                         cwd=self.dir, stdout=out, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL)

    def output(self) -> str:
        return self.log.read_text()

    def counters(self) -> dict:
        """Return the exporter's counters after its last export ({} before the first)."""
        running(self.proc, self.output, "the example service")
        try:
            return json.loads(self.status.read_text())
        except FileNotFoundError:
            return {}

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=scaled(30))
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        shutil.rmtree(self.dir, ignore_errors=True)


@contextlib.contextmanager
def service(user: int | None = None) -> Iterator[Service]:
    """Run the example service for the ``with`` block."""
    s = Service(user)
    try:
        yield s
    finally:
        s.close()


def perf_records(s: Service, event: str, data: Path, more: int = 3) -> tuple[list[str], int]:
    """Record ``event`` (``group:name``) with ``perf record -a`` while the service writes
    ``more`` records; return perf script's lines of it and how many records the service
    wrote while perf certainly listened (perf must have every one of them).

    perf enables its events, then starts its command: the command's mark says perf
    listens. An export that ends after the mark may have begun before it (its first
    records lost on CPUs perf had not enabled yet), so counting starts after the next."""
    from kernel.conftest import wait_for

    mark = data.with_suffix(".listening")
    perf = subprocess.Popen(["perf", "record", "-q", "-e", event, "-a", "-o", str(data), "--",
                             "sh", "-c", f"touch {mark} && exec cat"], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wait_for(lambda: running(perf, lambda: "", "perf record") and mark.exists(),
                 timeout=120, what="perf record to enable its events and start its command")
        before = s.counters().get("written", 0)
        after = wait_for(lambda: (w := s.counters().get("written", 0)) > before and w,
                         timeout=60, what="an export after perf listens", seen=s.counters)
        end = wait_for(lambda: (w := s.counters()["written"]) >= after + more and w,
                       timeout=60, what=f"{more} more records while perf listens",
                       seen=s.counters)
    finally:
        # Closing its stdin ends its command, and perf with it.
        _, err = perf.communicate(timeout=scaled(60))
    assert perf.returncode == 0, err
    script = subprocess.run(["perf", "script", "-i", str(data)], capture_output=True,
                            text=True, timeout=scaled(120))
    assert script.returncode == 0, script.stderr[-2000:]
    return [ln for ln in script.stdout.splitlines() if f"{event}:" in ln], end - after
