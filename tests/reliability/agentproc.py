"""A real agent process forked from the test process, for the reliability suite.

Forking from the already-imported test process instead of exec'ing a new interpreter
makes each start cost the agent's own start-up, not Python's and NumPy's imports, 100
times over in the kill -9 test (and several times slower under the VM's emulated CPU).
The child runs ``rezolus-ue run`` exactly as the command line does (``cli.main``).
"""

from __future__ import annotations

import logging
import os
import signal
import sys
from pathlib import Path

from rezolus_ue.samplers import REGISTRY


def config_with(tmp: Path, *samplers: str, **agent: str) -> Path:
    """Write a config enabling only ``samplers`` and return its path."""
    lines = ["[agent]", *(f"{k} = {v}" for k, v in agent.items()), ""]
    for name in REGISTRY:
        lines += [f"[samplers.{name}]", f"enabled = {'true' if name in samplers else 'false'}",
                  ""]
    path = tmp / "reliability.toml"
    path.write_text("\n".join(lines))
    return path


class ForkedAgent:
    """``rezolus-ue run --config CONF`` in a forked child; stdout+stderr to ``log``."""

    def __init__(self, conf: Path, log: Path, *args: str) -> None:
        self.log = log
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:  # the agent
            code = 1
            try:
                fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
                os.dup2(fd, 1)
                os.dup2(fd, 2)
                # pytest's capture replaced sys.stdout/stderr and holds the root logger's
                # handlers: without this the agent's log and tracebacks never reach ``log``.
                sys.stdout = open(1, "w", buffering=1, closefd=False)  # noqa: SIM115
                sys.stderr = open(2, "w", buffering=1, closefd=False)  # noqa: SIM115
                logging.root.handlers.clear()
                for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
                    signal.signal(s, signal.SIG_DFL)
                from rezolus_ue import cli

                code = cli.main(["run", "--config", str(conf), *args])
            except BaseException as e:  # report it; never return into pytest
                os.write(2, f"child failed: {e!r}\n".encode())
            finally:
                os._exit(code)
        self.pid = pid
        self.status: int | None = None

    def alive(self) -> bool:
        if self.status is None:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                self.status = status
        return self.status is None

    def kill9(self) -> None:
        os.kill(self.pid, signal.SIGKILL)
        _, self.status = os.waitpid(self.pid, 0)

    def stop(self) -> int:
        if self.alive():
            os.kill(self.pid, signal.SIGTERM)
            _, self.status = os.waitpid(self.pid, 0)
        assert self.status is not None
        return os.waitstatus_to_exitcode(self.status)

    def fds(self) -> int:
        return len(os.listdir(f"/proc/{self.pid}/fd"))

    def rss_kib(self) -> int:
        for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
        raise AssertionError("no VmRSS")

    def output(self) -> str:
        return self.log.read_text() if self.log.exists() else ""


def program_names() -> set[str]:
    """Return the names of every program in our built BPF objects (opened, not loaded)."""
    from rezolus_ue.bpf import build
    from rezolus_ue.bpf.libbpf import Object

    names: set[str] = set()
    for path in sorted(build.OUTPUT_DIR.glob("*.bpf.o")):
        with Object(path) as obj:
            names |= set(obj.programs)
    return names


def ours_in_kernel(names: set[str]) -> tuple[list[str], list[int]]:
    """Return our loaded programs (by name) and the ids of links attaching them.

    What ``bpftool prog show`` and ``bpftool link show`` list, asked through libbpf in
    this process: an exec of bpftool per check took about a second under the VM's
    emulated CPU, twice per kill -9 cycle. (tests/kernel/test_bpf_demand.py uses bpftool
    itself, so the two agree.)
    """
    from rezolus_ue.bpf.libbpf import link_programs, loaded_programs

    short = {n[:15] for n in names}  # the kernel keeps 15 characters of a program's name
    progs = {i: n for i, n in loaded_programs().items() if n in short}
    links = [lk for lk, prog in link_programs().items() if prog in progs]
    return sorted(progs.values()), links
