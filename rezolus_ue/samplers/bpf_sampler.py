"""What every BPF sampler shares: loading by probed attach kind, demand-driven collection,
interval bookkeeping, and the capture/parse shape of every sampler (``base``).

Reading: once per publish interval (BPF samplers do not oversample), ``capture`` copies
the maps (``BpfCapture``: every histogram map, whose copy becomes the next interval's
baseline, so each interval closes whether or not anyone watches it; the other maps,
``reads``, of the wanted families only) and the attached time of the interval;
``parse`` turns the copies into rows (histogram deltas, sums over CPUs), which
``publish_rows`` writes.

Lifecycle (``collect = "on-demand"``, the default): ``start`` probes the attach kinds and
creates the maps only (no program is loaded or verified: starting stays cheap, which
matters with many BPF samplers), so a missing object, missing BTF or an unsupported
hook shows at start; ``verify`` (run by ``rezolus-ue check``, after dropping to the
agent's privileges) loads and attaches the programs once, so a verifier rejection or a
refused attach shows there, and otherwise at the first activation, which then makes the
sampler unavailable with the kernel's reason. With no consumer none of our programs
is in the kernel. ``activate`` (a consumer enabled one of the sampler's events)
loads and attaches; ``deactivate`` (the last consumer left; the agent checks every publish
interval) detaches and unloads. The maps user space reads (every ``BPF_F_MMAPABLE`` one,
``.bss`` included) and those named in ``keep_maps`` survive unloading
(``BpfObject.unload``), so histograms and counters stay cumulative across cycles, and
every histogram record carries ``attached_ns``, the part of its interval the programs were
attached: the first record after a re-attach says it covers less than an interval.

``collect = "always"`` attaches at start and never detaches (the agent still publishes
only while a consumer listens).

Activation on demand runs in ``LOADER``: one background thread for every sampler, loading
one object at a time, so the loads (each parses the kernel's BTF, ~5 MB, twice, and runs
the verifier) neither keep the publishing thread off the GIL for long nor hold nine BTF
copies at once. The thread runs at the agent's own priority: at a lower one, on busy
CPUs the scheduler left it holding the GIL, and the publishing thread waited for it
(publish ticks 0.75-1.24 s apart under stress-ng at nice 19; 0.996-1.004 s without
lowering it; tests/kernel/test_bpf_under_the_agents_privileges.py).
"""

from __future__ import annotations

import contextlib
import random
import threading
import time
from collections import deque
from collections.abc import Mapping
from typing import ClassVar, NamedTuple

import numpy as np

from ..bpf.libbpf import Object
from ..bpf.loader import ATTACH_KINDS, BpfObject
from ..config import Option
from ..errors import RezolusError
from ..metrics import h2
from ..metrics.family import Family
from .base import Rows, Sampler

COLLECT_MODES = ("on-demand", "always")

#: The options every BPF sampler has (documented in configs/default.toml).
BPF_OPTIONS = (
    Option("attach", "choice", "auto",
           "How the BPF programs attach: \"auto\" picks the best the kernel supports"
           " (tp_btf, then raw_tp, then tracepoint).",
           choices=("auto", *ATTACH_KINDS)),
    Option("collect", "choice", "on-demand",
           "\"on-demand\": BPF programs are loaded and attached only while a consumer has"
           " one of this sampler's events enabled; \"always\": attached from start to exit.",
           choices=COLLECT_MODES),
)


class Loader:
    """Activates BPF samplers one at a time in one background thread (see the module
    docstring); the thread exits when nothing is queued."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._queue: deque[BpfSampler] = deque()
        self._busy: BpfSampler | None = None
        self._thread: threading.Thread | None = None

    def submit(self, sampler: BpfSampler) -> None:
        """Queue ``sampler.activate()``; its outcome goes to ``sampler.loaded_with``."""
        with self._cond:
            self._queue.append(sampler)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="bpf-loader",
                                                daemon=True)
                self._thread.start()

    def forget(self, sampler: BpfSampler) -> None:
        """Drop ``sampler`` from the queue, or wait until its activation in progress ends."""
        with self._cond:
            with contextlib.suppress(ValueError):
                self._queue.remove(sampler)
            while self._busy is sampler:
                self._cond.wait()

    def _run(self) -> None:
        while True:
            with self._cond:
                if not self._queue:
                    self._thread = None
                    return
                sampler = self._busy = self._queue.popleft()
            error: BaseException | None = None
            try:
                sampler.activate()
            except BaseException as e:  # reported by poll_activation in the agent's thread
                error = e
            with self._cond:
                sampler.loaded_with(error)
                self._busy = None
                self._cond.notify_all()


LOADER = Loader()


class PartTime:
    """Attaches one program of a loaded ``BpfObject`` for ``window_ns`` at a random moment
    of every ``period_ns``, from a thread of its own, and keeps count of the time it was
    attached: a program too costly to run on every event (e.g. syscall entry) runs in
    windows, and what it measures is a time sample whose share ``take`` tells.

    The moment is random in each period so that a workload periodic in time is not always
    caught at the same phase. Attaching a raw tracepoint or tp_btf program is one bpf()
    call (a classic tracepoint: perf_event_open and an ioctl); twice a period, that is
    all this costs.
    """

    def __init__(self, bpf: BpfObject, tracepoint: str, window_ns: int,
                 period_ns: int = 1_000_000_000) -> None:
        self.bpf, self.tracepoint = bpf, tracepoint
        self.window_ns, self.period_ns = window_ns, period_ns
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        #: Attached time not yet taken, and when the current window opened (None: closed).
        self._attached_ns = 0
        self._since: int | None = None
        #: Why attaching failed (the thread stopped): raised by ``take``.
        self.error: RezolusError | None = None

    def start(self) -> None:
        """Start the windows (the object's other programs attached already)."""
        if self._thread is not None:
            return
        self._stop.clear()
        self.error = None
        with self._lock:  # a new activation: its first interval starts now, as base's do
            self._attached_ns = 0
        self._thread = threading.Thread(target=self._run, daemon=True,
                                        name=f"{self.bpf.name}-windows")
        self._thread.start()

    def stop(self) -> None:
        """Close the current window, if open, and end the thread (before an unload)."""
        thread, self._thread = self._thread, None
        if thread is None:
            return
        self._stop.set()
        thread.join()

    def _run(self) -> None:
        rng = random.Random()
        period = time.monotonic_ns()
        try:
            while True:
                opens = period + rng.randrange(self.period_ns - self.window_ns + 1)
                if self._stop.wait(max(0, opens - time.monotonic_ns()) / 1e9):
                    return
                self._open()
                if self._stop.wait(self.window_ns / 1e9):
                    return
                self._close()
                period = max(period + self.period_ns, time.monotonic_ns())  # behind: skip
                if self._stop.wait(max(0, period - time.monotonic_ns()) / 1e9):
                    return
        except Exception as e:  # kept for take(), in the agent's thread: no traceback here
            self.error = e if isinstance(e, RezolusError) else RezolusError(
                f"{self.bpf.name}: attaching {self.tracepoint} for a timing window failed: {e}")
        finally:
            with contextlib.suppress(Exception):
                self._close()

    def _open(self) -> None:
        with self._lock:
            self.bpf.attach_hook(self.tracepoint)
            self._since = time.monotonic_ns()

    def _close(self) -> None:
        with self._lock:
            if self._since is None:
                return
            self.bpf.detach_hook(self.tracepoint)
            self._attached_ns += time.monotonic_ns() - self._since
            self._since = None

    def take(self) -> int:
        """Return the ns the program was attached since the last call (start anew); raise
        why the windows stopped if attaching failed."""
        if self.error is not None:
            raise self.error
        with self._lock:
            now = time.monotonic_ns()
            taken, self._attached_ns = self._attached_ns, 0
            if self._since is not None:
                taken, self._since = taken + now - self._since, now
            return taken


class BpfCapture(NamedTuple):
    """One reading of a BPF sampler's maps (``BpfSampler.capture``): copies, no parsing."""

    #: ns the programs were attached since the previous capture (histograms' attached_ns).
    window: int
    #: The families a consumer has an event of enabled (only these get rows).
    wanted: set[Family]
    #: Per wanted histogram family: copies of its map now and at the previous capture,
    #: shaped (rows, H2 buckets): one row per label set (one for an ``H2_HISTOGRAM``).
    hists: Mapping[Family, tuple[np.ndarray, np.ndarray]]
    #: Copies of the ``reads`` maps of the wanted families, by map name.
    maps: Mapping[str, np.ndarray]


def whole_histograms(raw: BpfCapture) -> dict[Family, dict[tuple, tuple]]:
    """Return the rows of single-row histogram families (``H2_HISTOGRAM`` maps, no label):
    one each, the attached time and the interval's buckets, whether or not any moved."""
    return {fam: {(): (raw.window, h2.nonzero(h2.delta(cur[0], prev[0])[0]))}
            for fam, (cur, prev) in raw.hists.items()}


class BpfSampler(Sampler):
    """A sampler whose data comes from one BPF object, named after it: ``bpf/<name>.bpf.c``
    (its structs shared with Python in ``bpf/<name>.h``).

    Subclasses declare the maps they read, ``histograms`` (cumulative H2 maps) and
    ``reads`` (the others), and implement ``parse`` (a ``BpfCapture`` into ``Rows``);
    ``capture`` and ``publish`` are this class's and the base's. ``setup`` takes views of
    maps user space writes (e.g. ``attached_ns``) or inspects; set ``keep_maps`` only for
    maps user space writes that are not mmapable (mmapable ones, which it reads, are kept
    anyway).
    """

    origin = "BPF, on demand"

    #: Queued in, or being activated by, LOADER.
    _pending = False
    _error: BaseException | None = None
    #: Per-CPU maps sized to the possible CPUs before load.
    per_cpu_maps: ClassVar[tuple[str, ...]] = ()
    #: Maps user space writes that keep their contents across unload/load, beyond the
    #: mmapable ones (always kept: cumulative data, .bss).
    keep_maps: ClassVar[tuple[str, ...]] = ()
    #: (family, map name) of each cumulative H2 histogram map (``H2_HISTOGRAM``, or
    #: ``H2_HISTOGRAMS``: one row per label set).
    histograms: ClassVar[tuple[tuple[Family, str], ...]] = ()
    #: (family, map name) of each other map a family's rows are read from; a map is
    #: copied at capture while one of its families is wanted.
    reads: ClassVar[tuple[tuple[Family, str], ...]] = ()
    options: ClassVar[tuple[Option, ...]] = BPF_OPTIONS
    oversample = False

    def configure(self, obj: Object) -> None:
        """Adjust the opened object before each load (e.g. .rodata settings)."""

    def setup(self, bpf: BpfObject) -> None:
        """Take views of the maps user space writes or inspects (called once, after the
        first load, after ``histograms`` and ``reads`` got theirs)."""

    def on_attach(self, now_ns: int) -> None:
        """Called just before the programs attach (e.g. tell them the attach time)."""

    @property
    def collect(self) -> str:
        """Return the configured collection mode."""
        return self.str_option("collect")

    def start(self) -> None:
        bpf = BpfObject(self.name, prefer=self.str_option("attach"),
                        per_cpu_maps=self.per_cpu_maps, keep_maps=self.keep_maps,
                        before_load=self.configure)
        bpf.load(programs=self.collect == "always")
        try:
            self._hists = {fam: bpf.array(m) for fam, m in self.histograms}
            #: Per histogram family: its map at the last capture (the interval's base;
            #: zeros now, the maps being new).
            self._prev = {fam: view.copy() for fam, view in self._hists.items()}
            self._reads = [(fam, m, bpf.array(m)) for fam, m in self.reads]
            self.setup(bpf)
        except BaseException:
            bpf.close()
            raise
        self._bpf = bpf
        #: Start of the attached part of the current interval (None: detached).
        self._since: int | None = None
        if self.collect == "always":
            self.activate()
        else:
            bpf.unload()

    def verify(self) -> None:
        """Do once what a consumer's arrival does, load (the verifier runs) and attach, then
        detach and unload again: ``check`` runs it with the privileges the agent keeps."""
        if self._bpf.attached:
            return
        self.activate()
        self.deactivate()

    @property
    def bpf(self) -> BpfObject:
        """Return the sampler's BPF object (loaded only while attached, on demand)."""
        return self._bpf

    @property
    def detail(self) -> str:  # type: ignore[override]
        bpf = getattr(self, "_bpf", None)
        if bpf is None:
            return ""
        if self._pending:
            return f"loading: a consumer arrived (collect {self.collect})"
        if bpf.attached:
            return f"attached ({bpf.attach_kinds}), collect {self.collect}"
        return (f"detached: no consumer (collect {self.collect}; attaches as"
                f" {bpf.attach_kinds})")

    @detail.setter
    def detail(self, value: str) -> None:
        pass  # derived from the BPF object's state

    def activate_async(self) -> None:
        """Queue the load and attach in LOADER: verifying several objects takes long enough
        (0.1 s each natively, seconds under emulation) to stall every other sampler's
        records."""
        if self._bpf.attached or self._pending:
            return
        self._error = None
        self._pending = True
        LOADER.submit(self)

    def loaded_with(self, error: BaseException | None) -> None:
        """LOADER finished this sampler's activation (``error``: how it failed)."""
        self._error = error
        self._pending = False

    def poll_activation(self) -> bool:
        if self._pending:
            return False
        err, self._error = self._error, None
        if isinstance(err, RezolusError):
            raise err
        if err is not None:
            raise RezolusError(f"{self.name}: loading the BPF programs failed: {err}")
        return True

    def _join(self) -> None:
        if self._pending:
            LOADER.forget(self)
            self._pending = False

    def activate(self) -> None:
        if self._bpf.attached:
            return
        self._bpf.load()
        now = time.monotonic_ns()
        # Baseline: the first record after attaching covers only the attached time.
        for fam, view in self._hists.items():
            self._prev[fam] = view.copy()
        self.on_attach(now)
        self._bpf.attach()
        self._since = now

    def deactivate(self) -> None:
        self._join()
        self._error = None
        if self.collect == "always":
            return
        self._bpf.unload()
        self._since = None

    def window(self) -> int:
        """Return the ns attached since the last call (0 while detached); start anew."""
        now = time.monotonic_ns()
        if self._since is None:
            return 0
        window, self._since = now - self._since, now
        return window

    def capture(self) -> BpfCapture:
        """Return copies of the maps (``BpfCapture``); every histogram's copy becomes the
        next interval's base, watched or not: the next record covers one interval."""
        window = self.window()
        wanted = self.wanted_families()
        hists = {}
        for fam, view in self._hists.items():
            cur = view.copy()
            prev, self._prev[fam] = self._prev[fam], cur
            if fam in wanted:
                hists[fam] = (cur.reshape(-1, h2.BUCKETS), prev.reshape(-1, h2.BUCKETS))
        maps = {}
        for fam, name, view in self._reads:
            if fam in wanted and name not in maps:
                maps[name] = view.copy()
        return BpfCapture(window, wanted, hists, maps)

    def parse(self, raw: BpfCapture) -> Rows:
        """Return the rows of a capture: histogram deltas, sums over CPUs (subclasses)."""
        raise NotImplementedError(f"sampler {self.name} has no parse")

    def close(self) -> None:
        self._join()
        self._hists = {}
        self._reads = []
        bpf = getattr(self, "_bpf", None)
        if bpf is not None:
            bpf.close()
