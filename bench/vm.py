"""Run a benchmark inside the test VM (virtme-ng, emulated CPU, this machine's root shared),
for the kernel features the host lacks (user_events) or to measure there."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def run_in_vm(bzimage: str, script: str, args: list[str]) -> int:
    """Run ``python bench/<script> ARGS`` as root in a VM booted from ``bzimage`` (2 vCPUs,
    2 GB), the venv's bin first on PATH (the installed CLI); return its exit status. A dead
    guest (a failed boot on a busy host, see tests/conftest.py) gets one more boot."""
    py = Path(sys.executable)
    inner = (f"cd {shlex.quote(str(ROOT))} && PATH={shlex.quote(str(py.parent))}:$PATH"
             f" {shlex.quote(str(py))} bench/{script} {shlex.join(args)}")
    cmd = ["vng", "--run", bzimage, "--disable-kvm", "--force-9p", "--user", "root",
           "--cpus", "2", "--memory", "2G", "--rwdir", str(ROOT), "--exec", inner]
    # setup.sh --dev installs virtme-ng (vng, and the virtme-run it calls) into the venv.
    env = {**os.environ, "PATH": f"{py.parent}:{os.environ.get('PATH', '/usr/bin:/bin')}"}
    rc = 0
    for attempt in (1, 2):
        rc = subprocess.call(cmd, env=env)
        if rc == 0:
            return 0
        print(f"vng exited {rc} (attempt {attempt})", file=sys.stderr, flush=True)
    return rc
