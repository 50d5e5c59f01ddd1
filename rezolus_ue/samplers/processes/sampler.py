"""The processes sampler's class (what it reads and publishes: the package docstring)."""

from __future__ import annotations

import contextlib
import errno
import os
import pwd
import resource
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from operator import itemgetter
from pathlib import Path
from typing import NamedTuple

from ...errors import RezolusError, SamplerUnavailable
from ...linux.procfs import KeptOpen
from ...metrics.family import Family
from ..base import Sampler, SharedFile
from ..cgroup.sampler import truncate_label
from ..ranked import Kept, rank
from ..scheduler.sampler import parse_stat_scheduler
from . import COMM, FAMILIES, OPTIONS, PROCESS, PROCESSES, USER

#: errno of a process that exited while it was read: its directory is gone at open
#: (ENOENT), or a kept-open file's task was reaped (ESRCH, also once its pid is reused).
GONE = frozenset((errno.ENOENT, errno.ESRCH))
#: errno of a process this agent may not read: hidepid refuses the directory (EPERM), or
#: /proc/<pid>/io needs ptrace access to the process (EACCES).
DENIED = frozenset((errno.EACCES, errno.EPERM))

#: Positions of the fields of /proc/<pid>/stat after the ") " that ends comm (field 3,
#: state, is 0), as proc_pid_stat(5) numbers them minus 3.
_STATE, _UTIME, _STIME, _CUTIME, _CSTIME, _THREADS, _START, _RSS = 0, 11, 12, 13, 14, 17, 19, 21
#: Splits needed to reach rss: the other 30 fields stay one token.
_SPLITS = _RSS + 1
#: Bytes asked of one stat read: a line is ~300 bytes (a longer one is read again).
_STAT_SIZE = 1024
#: Longest comm and user name published: the labels' sizes, less the NUL.
_COMM_MAX, _USER_MAX = COMM.type.size - 1, USER.max_len - 1
#: The kept-open files are at most this share of RLIMIT_NOFILE (other samplers keep
#: theirs); processes beyond are opened, read and closed at each walk.
_FD_SHARE = 2

#: The fields of a tracked process, one list per process updated in place: its stat's fd
#: and last bytes, (pid, start), utime + stime, cutime + cstime, state, rss, threads; its
#: schedstat's fd and last bytes; its io's fd, last bytes and read + write bytes; the
#: walk that last read its stat.
(_FD, _RAW, _KEY, _CPU, _CHILD, _ST, _RSS_PAGES, _NTHREADS, _SSFD, _SSRAW, _IOFD, _IORAW,
 _IO, _WALK) = range(14)
#: An fd field of a file read by path at each walk (no fd kept: the budget is spent).
_BY_PATH = -1
#: _IOFD of a process whose io is not read: not wanted, or refused.
_NO_IO, _IO_DENIED = -2, -3
#: _SSFD of a process whose schedstat is not read (the gate is off).
_NO_SS = -2

_state_of, _iofd_of = itemgetter(_ST), itemgetter(_IOFD)
_key_of, _rss_of = itemgetter(_KEY), itemgetter(_RSS_PAGES)
#: Summary counts: the PROCESSES scalar of each scheduler state letter.
_STATE_SLOTS = {b"R": "running", b"S": "sleeping", b"D": "blocked", b"Z": "zombie",
                b"T": "stopped", b"t": "stopped", b"I": "idle"}


def _pread(fd: int, size: int, offset: int) -> bytes:
    """os.pread, looked up at each walk: tests stand in procfs's ESRCH of a reaped task."""
    return os.pread(fd, size, offset)


class Stat(NamedTuple):
    """What a /proc/<pid>/stat line says, in its units (clock ticks, pages)."""

    pid: int
    comm: bytes
    state: bytes
    utime: int
    stime: int
    cutime: int
    cstime: int
    threads: int
    start: int
    rss: int


def parse_stat(data: bytes) -> Stat:
    """Return the fields of a /proc/<pid>/stat line (comm may hold spaces and ")": the
    fields follow its last ")")."""
    head, _, tail = data.rpartition(b") ")
    pid, _, comm = head.partition(b" (")
    f = tail.split(None, _SPLITS)
    return Stat(int(pid), comm, f[_STATE], int(f[_UTIME]), int(f[_STIME]), int(f[_CUTIME]),
                int(f[_CSTIME]), int(f[_THREADS]), int(f[_START]), int(f[_RSS]))


def parse_io(data: bytes) -> tuple[int, int]:
    """Return (read_bytes, write_bytes) of /proc/<pid>/io."""
    f = data.split()
    # rchar wchar syscr syscw read_bytes write_bytes cancelled_write_bytes, "name: value"
    return int(f[9]), int(f[11])


def parse_status(data: bytes) -> tuple[int, int, int]:
    """Return (real uid, voluntary, involuntary context switches) of /proc/<pid>/status."""
    return (_status_int(data, b"\nUid:"), _status_int(data, b"\nvoluntary_ctxt_switches:"),
            _status_int(data, b"\nnonvoluntary_ctxt_switches:"))


def _status_int(data: bytes, key: bytes) -> int:
    at = data.find(key)
    if at < 0:
        return 0
    return int(data[at + len(key):].split(None, 1)[0])


def parse_cgroup(data: bytes) -> str:
    """Return the cgroup v2 path of /proc/<pid>/cgroup (its ``0::`` line; "" on a host
    with cgroup v1 only), cut as the cgroup sampler's labels are."""
    data = b"\n" + data
    at = data.find(b"\n0::")
    if at < 0:
        return ""
    return truncate_label(os.fsdecode(data[at + 4:].partition(b"\n")[0]))


def parse_loadavg(data: bytes) -> tuple[int, int, int, int]:
    """Return (load 1m, 5m, 15m, each x 1000; threads) of /proc/loadavg."""
    f = data.split()
    return (_milli(f[0]), _milli(f[1]), _milli(f[2]), int(f[3].partition(b"/")[2]))


def _milli(text: bytes) -> int:
    whole, _, frac = text.partition(b".")
    return int(whole) * 1000 + int((frac + b"000")[:3])


class Published(NamedTuple):
    """One process to publish, as captured."""

    stat: bytes
    io: tuple[int, int] | None
    cpu_interval: int  # clock ticks
    io_interval: int  # bytes
    status: bytes
    cgroup: bytes


class Capture(NamedTuple):
    """One walk of every process, and the files of those published."""

    published: list[Published] | None  # None: rezolus_process not wanted
    summary: bool  # rezolus_processes wanted
    states: Counter[bytes]  # of the processes read
    hidden: int  # processes whose stat could not be read
    unreadable: int  # and those, with the processes whose io could not be read
    proc_stat: bytes | None  # None: not wanted, or no /proc/stat (a subset=pid mount)
    loadavg: bytes | None
    exited_ticks: int  # the counter, since start


class _Detail:
    """The files of a published process: status and cgroup, and io when it is not read
    at every walk (top_io = 0), with the io total it last read."""

    __slots__ = ("cgroup", "io", "io_total", "status")

    def __init__(self, status: KeptOpen, cgroup: KeptOpen | None,
                 io: KeptOpen | None) -> None:
        self.status, self.cgroup, self.io = status, cgroup, io
        self.io_total: int | None = None

    def close(self) -> None:
        for f in (self.status, self.cgroup, self.io):
            if f is not None:
                f.close()


class Processes(Sampler):
    """The busiest processes' CPU, memory, IO and context switches; a summary of all."""

    origin = "procfs"

    name = "processes"
    families = FAMILIES
    oversample = False
    options = OPTIONS

    def start(self) -> None:
        self._top_cpu = self.int_option("top_cpu")
        self._top_rss = self.int_option("top_rss")
        self._top_io = self.int_option("top_io")
        procfs = self.ctx.roots.procfs
        self._proc = str(procfs)
        try:
            os.listdir(self._proc)
        except OSError as e:
            raise SamplerUnavailable(self.name, f"cannot list {self._proc}:"
                                     f" {e.strerror}") from None
        self._tick_ns = 1_000_000_000 // os.sysconf("SC_CLK_TCK")
        self._page = os.sysconf("SC_PAGE_SIZE")
        self._boottime_ns = lambda: time.clock_gettime_ns(time.CLOCK_BOOTTIME)
        self._gate = schedstat_works(procfs)
        missing = []
        self._stat: SharedFile | None = None
        self._loadavg: KeptOpen | None = None
        try:
            self._stat = self.ctx.shared.open(procfs / "stat")
        except (OSError, RezolusError):
            missing.append("stat")
        try:
            self._loadavg = KeptOpen(procfs / "loadavg")
        except (OSError, RezolusError):
            missing.append("loadavg")
        self._missing = (f"no {' or '.join(f'{self._proc}/{m}' for m in missing)} (a"
                         " subset=pid mount?): the summary's threads, run queue, forks and"
                         " load read 0") if missing else ""
        self.detail = self._missing
        self._t_ns: int | None = None
        self._users: dict[int, str] = {}
        self._exited = 0  # clock ticks: the exited_cpu_ns counter
        self._procs: dict[str, list] = {}
        self._details: Kept[tuple[int, int], _Detail] = Kept()
        self._reset()

    def _reset(self) -> None:
        """Forget every process (closing their files): the next walk has no baseline."""
        for e in self._procs.values():
            _close_entry(e)
        self._procs = {}
        self._details.close()
        self._kept_fds = 0
        self._read_io = False
        self._walks = 0
        #: Reaped children's time of processes gone at the previous walk, not yet offset.
        self._gone = 0
        #: The boot-time clock tick of the previous walk's start (None: no walk yet).
        self._walk_tick: int | None = None
        soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        self._fd_budget = soft // _FD_SHARE if soft != resource.RLIM_INFINITY else 1 << 20

    def sample(self, t_ns: int, full: bool = True) -> None:
        # The tick's stamp, so that /proc/stat is read once per tick with the others'.
        self._t_ns = t_ns

    def deactivate(self) -> None:
        """The last consumer left: close every process's files and forget the baseline."""
        self._reset()

    # --- capture: the walk ----------------------------------------------------------

    def capture(self) -> Capture | None:
        want_process = self.family_wanted(PROCESS)
        want_summary = self.family_wanted(PROCESSES)
        if not (want_process or want_summary):
            return None
        proc_stat = loadavg = None
        if want_summary:
            if self._stat is not None:
                proc_stat = self._stat.read_at(self._t_ns)
            if self._loadavg is not None:
                loadavg = self._loadavg.read()
        read_io = want_process and self._top_io > 0
        if read_io != self._read_io:
            self._switch_io(read_io)
        cpu, io, child, hidden = self._walk(read_io)
        self._exited += child
        published = self._choose(cpu, io, read_io) if want_process else None
        self._set_detail()
        procs = self._procs.values()
        io_denied = sum(map(_IO_DENIED.__eq__, map(_iofd_of, procs)))
        return Capture(published, want_summary, Counter(map(_state_of, procs)), hidden,
                       hidden + io_denied, proc_stat, loadavg, self._exited)

    def _set_detail(self) -> None:
        notes = [self._missing] if self._missing else []
        if self._kept_fds >= self._fd_budget:
            by_path = sum(e[_FD] < 0 for e in self._procs.values())
            notes.append(f"{by_path} processes opened at each read: the kept-open files"
                         f" reached {self._fd_budget} (1/{_FD_SHARE} of RLIMIT_NOFILE)")
        self.detail = "; ".join(notes)

    def _walk(self, read_io: bool) -> tuple[dict, dict, int, int]:
        """Read every process's stat (and io); return the CPU ticks and io bytes each
        used since the previous walk (those with none left out), the growth of the CPU
        of reaped children, and how many processes' stat could not be read.

        A process with one thread whose schedstat (its time on CPU, in ns) has not moved
        did not run: nothing else of it is read (see the package docstring)."""
        procs, fresh = self._procs, {}
        prev_tick, now_tick = self._walk_tick, self._boottime_ns() // self._tick_ns
        self._walks = walk = self._walks + 1
        cpu: dict[tuple[int, int], int] = {}
        io: dict[tuple[int, int], int] = {}
        child = hidden = gone = 0
        pread, proc, gate = _pread, self._proc, self._gate
        try:
            for name in os.listdir(proc):
                e = procs.pop(name, None)
                if e is not None:
                    try:
                        if gate and e[_NTHREADS] == 1:
                            fd = e[_SSFD]
                            data = pread(fd, _STAT_SIZE, 0) if fd >= 0 else _read(
                                f"{proc}/{name}/schedstat")
                            if data == e[_SSRAW]:  # did not run: nothing moved
                                fresh[name] = e
                                continue
                            e[_SSRAW] = data
                        fd = e[_FD]
                        data = pread(fd, _STAT_SIZE, 0) if fd >= 0 else _read(
                            f"{proc}/{name}/stat")
                    except OSError as err:
                        if err.errno not in GONE and err.errno not in DENIED:
                            raise
                        self._kept_fds -= _close_entry(e)
                        if err.errno in DENIED:
                            hidden += 1
                            continue
                        gone += e[_CHILD]
                        e = None  # reaped; the name listed may be its pid reused
                    else:
                        e[_WALK] = walk
                        if data != e[_RAW]:  # unchanged (an idle process): nothing used
                            if len(data) >= _STAT_SIZE:
                                data = _read(f"{proc}/{name}/stat")
                            f = data.rpartition(b") ")[2].split(None, _SPLITS)
                            if int(f[_START]) != e[_KEY][1]:  # reused pid, read by path
                                self._kept_fds -= _close_entry(e)
                                gone += e[_CHILD]
                                e = None
                            else:
                                used = int(f[_UTIME]) + int(f[_STIME])
                                reaped = int(f[_CUTIME]) + int(f[_CSTIME])
                                if used > e[_CPU]:
                                    cpu[e[_KEY]] = used - e[_CPU]
                                if reaped > e[_CHILD]:
                                    child += reaped - e[_CHILD]
                                (e[_RAW], e[_CPU], e[_CHILD], e[_ST], e[_RSS_PAGES],
                                 e[_NTHREADS]) = (data, used, reaped, f[_STATE], int(f[_RSS]),
                                                  int(f[_THREADS]))
                if e is None:
                    if not name.isdigit():
                        continue
                    e = self._open(name, read_io)
                    if e is None:  # exited meanwhile
                        continue
                    if e is False:
                        hidden += 1
                        continue
                    e[_WALK] = walk
                    fresh[name] = e
                    # Started since the previous walk: all it used is the interval's.
                    # Otherwise it has no figure for the interval (not seen before).
                    if prev_tick is not None and e[_KEY][1] >= prev_tick:
                        if e[_CPU]:
                            cpu[e[_KEY]] = e[_CPU]
                        if e[_IO]:
                            io[e[_KEY]] = e[_IO]
                    continue
                fresh[name] = e
                fd = e[_IOFD]
                if read_io and fd >= _BY_PATH:
                    try:
                        data = pread(fd, _STAT_SIZE, 0) if fd >= 0 else _read(
                            f"{proc}/{name}/io")
                    except OSError as err:
                        if err.errno in DENIED:  # e.g. it exec'd a setuid program
                            self._kept_fds -= _stop_io(e)
                            e[_IOFD] = _IO_DENIED
                        elif err.errno not in GONE:  # gone: the next walk drops it
                            raise
                        continue
                    if data != e[_IORAW]:
                        f = data.split()
                        total = int(f[9]) + int(f[11])  # read_bytes, write_bytes
                        if total > e[_IO]:
                            io[e[_KEY]] = total - e[_IO]
                        e[_IORAW], e[_IO] = data, total
        except BaseException:
            fresh.update(procs)  # every entry stays tracked: no fd leaks
            self._procs = fresh
            raise
        for e in procs.values():  # not listed any more: exited
            self._kept_fds -= _close_entry(e)
            gone += e[_CHILD]
        self._procs = fresh
        self._walk_tick = now_tick
        return cpu, io, self._once(child, gone), hidden

    def _once(self, child: int, gone: int) -> int:
        """Return the growth of reaped children's CPU with each grandchild counted once:
        a process that exited took its own reaped children's time (``gone``, counted as it
        grew) into its reaper's cutime. Its reaper may have been read before the reap in
        this walk, so what is not offset now is offset at the next walk, then forgotten."""
        total = self._gone + gone
        taken = min(child, total)
        self._gone = min(total - taken, gone)
        return child - taken

    def _switch_io(self, read_io: bool) -> None:
        """Start (with each total so far as the baseline) or stop reading every process's
        io at each walk."""
        self._read_io = read_io
        for name, e in self._procs.items():
            if read_io:
                self._start_io(name, e)
            else:
                self._kept_fds -= _stop_io(e)

    def _open(self, name: str, read_io: bool) -> list | bool | None:
        """Return a new process's entry: None if it exited meanwhile, False if it may not
        be read."""
        path = f"{self._proc}/{name}/stat"
        ss_fd, ss = _NO_SS, b""
        try:
            if self._gate:  # first: it must not move before the stat it stands for
                ss_fd, ss = self._open_read(f"{self._proc}/{name}/schedstat")
            fd, data = self._open_read(path)
        except OSError as err:
            if ss_fd >= 0:
                os.close(ss_fd)
                self._kept_fds -= 1
            if err.errno in GONE:
                return None
            if err.errno in DENIED:
                return False
            raise
        if len(data) >= _STAT_SIZE:
            data = _read(path)
        s = parse_stat(data)
        e = [fd, data, (s.pid, s.start), s.utime + s.stime, s.cutime + s.cstime, s.state,
             s.rss, s.threads, ss_fd, ss, _NO_IO, b"", 0, 0]
        if read_io:
            self._start_io(name, e)
        return e

    def _open_read(self, path: str) -> tuple[int, bytes]:
        """Return a kept-open fd of ``path`` (_BY_PATH once the fd budget is spent: read
        by path at each walk) and its contents."""
        if self._kept_fds >= self._fd_budget:
            return _BY_PATH, _read(path)
        try:
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        except OSError as err:
            if err.errno in (errno.EMFILE, errno.ENFILE):
                raise RezolusError(f"out of file descriptors reading {self._proc}: raise"
                                   " the agent's open-files limit (LimitNOFILE)") from None
            raise
        try:
            data = _pread(fd, _STAT_SIZE, 0)
        except BaseException:
            os.close(fd)
            raise
        self._kept_fds += 1
        return fd, data

    def _start_io(self, name: str, e: list) -> None:
        """Open and read a process's io: its total so far is the next walk's baseline
        (refused: marked so, and not asked again)."""
        try:
            e[_IOFD], e[_IORAW] = self._open_read(f"{self._proc}/{name}/io")
        except OSError as err:
            if err.errno in DENIED:
                e[_IOFD] = _IO_DENIED
            elif err.errno not in GONE:
                raise
            return
        r, w = parse_io(e[_IORAW])
        e[_IO] = r + w

    # --- capture: the chosen ones ---------------------------------------------------

    def _choose(self, cpu: Mapping[tuple[int, int], int], io: Mapping[tuple[int, int], int],
                io_walked: bool) -> list[Published]:
        """Return the processes to publish (top_cpu by CPU in the interval, then top_rss by
        RSS and top_io by IO bytes in the interval, each once), their files read."""
        chosen = rank(cpu.keys(), cpu.values(), self._top_cpu, positive=True)
        procs = self._procs.values()
        chosen += rank(map(_key_of, procs), map(_rss_of, procs), self._top_rss,
                       skip=set(chosen), positive=True)
        if io_walked:
            chosen += rank(io.keys(), io.values(), self._top_io, skip=set(chosen),
                           positive=True)
        by_key = {}
        for key in chosen:
            e = self._procs.get(str(key[0]))
            if e is not None and e[_KEY] == key:
                by_key[key] = e
        self._details.keep(list(by_key), lambda key: self._open_detail(key, not io_walked))
        out = []
        for key, e in by_key.items():
            d = self._details.get(key)
            if d is None:
                continue  # exited since its stat was read
            try:
                if e[_WALK] != self._walks:  # it did not run: its rss may have moved
                    fd = e[_FD]
                    e[_RAW] = _pread(fd, _STAT_SIZE, 0) if fd >= 0 else _read(
                        f"{self._proc}/{key[0]}/stat")
                status = d.status.read()
                cgroup = d.cgroup.read() if d.cgroup is not None else b""
            except OSError as err:
                if err.errno not in GONE and err.errno not in DENIED:
                    raise
                self._details.drop(key)
                continue
            io_now = parse_io(e[_IORAW]) if e[_IORAW] else None
            if d.io is not None:
                try:
                    io_now = parse_io(d.io.read())
                except OSError as err:
                    if err.errno in DENIED:  # no ptrace access: published without io
                        d.io.close()
                        d.io = None
                    elif err.errno not in GONE:  # gone: published as its stat was read
                        raise
            if d.io is not None and io_now is not None:
                total = io_now[0] + io_now[1]
                io_interval = total - d.io_total if d.io_total is not None else 0
                d.io_total = total
            else:
                io_interval = io.get(key, 0)
            out.append(Published(e[_RAW], io_now, cpu.get(key, 0), max(io_interval, 0),
                                 status, cgroup))
        return out

    def _open_detail(self, key: tuple[int, int], with_io: bool) -> _Detail:
        """Open the status and cgroup (and io) of process ``key`` (FileNotFoundError: it
        exited, perhaps its pid reused since its stat was read)."""
        path = f"{self._proc}/{key[0]}"
        d = _Detail(KeptOpen(f"{path}/status"), None, None)
        try:
            d.cgroup = KeptOpen(f"{path}/cgroup")
            if with_io:
                # Refused (no ptrace access): published without io.
                with contextlib.suppress(OSError, RezolusError):
                    d.io = KeptOpen(f"{path}/io")
            # Its pid cannot be reused while it lives: if the stat read after the opens
            # is still its own, so are the files.
            if parse_stat(_read(f"{path}/stat")).start != key[1]:
                raise FileNotFoundError(f"{path}: another process")
        except BaseException:
            d.close()
            raise
        return d

    # --- parse ----------------------------------------------------------------------

    def parse(self, raw: Capture | None) -> Mapping[Family, Mapping[tuple, Sequence[int]]]:
        if raw is None:
            return {}
        rows: dict[Family, Mapping[tuple, Sequence[int]]] = {}
        tick, page = self._tick_ns, self._page
        if raw.published is not None:
            table = {}
            for p in raw.published:
                s = parse_stat(p.stat)
                uid, voluntary, involuntary = parse_status(p.status)
                r, w = p.io if p.io is not None else (0, 0)
                table[(s.pid, s.comm[:_COMM_MAX], self._user(uid), parse_cgroup(p.cgroup),
                       s.state)] = (
                    s.start * tick, s.utime * tick, s.stime * tick, p.cpu_interval * tick,
                    s.rss * page, r, w, p.io_interval, s.threads, voluntary, involuntary)
            rows[PROCESS] = table
        if raw.summary:
            rows[PROCESSES] = {(): self._summary(raw)}
        return rows

    def _summary(self, raw: Capture) -> tuple[int, ...]:
        counts = dict.fromkeys(("running", "sleeping", "blocked", "zombie", "stopped",
                                "idle"), 0)
        for state, n in raw.states.items():
            slot = _STATE_SLOTS.get(state)
            if slot is not None:
                counts[slot] += n
        # /proc/stat as the scheduler sampler reads it (the same file, read once a tick).
        _ctxt, forks, running, blocked = (parse_stat_scheduler(raw.proc_stat)
                                          if raw.proc_stat is not None else (0, 0, 0, 0))
        l1, l5, l15, threads = (parse_loadavg(raw.loadavg) if raw.loadavg is not None
                                else (0, 0, 0, 0))
        published = len(raw.published) if raw.published is not None else 0
        return (sum(raw.states.values()) + raw.hidden, *counts.values(), threads,
                running, blocked, forks, l1, l5, l15, raw.exited_ticks * self._tick_ns,
                published, raw.unreadable)

    def _user(self, uid: int) -> str:
        """Return the name of ``uid`` (looked up once), else the uid in decimal."""
        name = self._users.get(uid)
        if name is None:
            try:
                name = pwd.getpwuid(uid).pw_name.encode()[:_USER_MAX].decode(
                    "utf-8", "ignore")
            except (KeyError, OverflowError):
                name = str(uid)
            self._users[uid] = name
        return name

    def close(self) -> None:
        if hasattr(self, "_procs"):
            self._reset()
        if getattr(self, "_stat", None) is not None:
            self._stat.close()  # type: ignore[union-attr]
            self._stat = None
        if getattr(self, "_loadavg", None) is not None:
            self._loadavg.close()  # type: ignore[union-attr]
            self._loadavg = None


def _read(path: str) -> bytes:
    """Return a file's contents: open, read, close (for processes without kept fds)."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        chunks = []
        while True:
            data = os.read(fd, 65536)
            if not data:
                return b"".join(chunks)
            chunks.append(data)
    finally:
        os.close(fd)


def _close_entry(e: list) -> int:
    """Close a process entry's kept-open fds; return how many."""
    n = _stop_io(e)
    for i in (_FD, _SSFD):
        if e[i] >= 0:
            os.close(e[i])
            n += 1
            e[i] = _BY_PATH
    return n


def _stop_io(e: list) -> int:
    """Stop reading a process's io (closing its fd); return the fds closed."""
    fd = e[_IOFD]
    e[_IOFD], e[_IORAW], e[_IO] = _NO_IO, b"", 0
    if fd >= 0:
        os.close(fd)
        return 1
    return 0


def schedstat_works(procfs: Path) -> bool:
    """Return True if ``<procfs>/self/schedstat`` counts time on CPU: without
    CONFIG_SCHED_INFO there is no such file, and before Linux 5.14 (schedstats and
    delay accounting off) it reads "0 0 0" (a running reader has run once at least)."""
    try:
        data = _read(f"{procfs}/self/schedstat")
    except OSError:
        return False
    return len(data.split()) == 3 and data.split() != [b"0", b"0", b"0"]
