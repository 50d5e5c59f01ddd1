"""What every sampler is: its metric families (hence events), options, and the two steps
the agent drives, ``sample`` (every sample_interval while oversampling) and ``publish``
(every publish_interval while anyone listens).

Every sampler reads in one shape: ``capture()`` does the I/O (reads files, copies BPF
maps) and nothing else; ``parse(raw)`` turns a capture into rows, ``{family: {labels:
values}}`` with values in the family's metric order (a histogram's, declared last, as
the interval's non-zero buckets ``(indices, counts)``); ``publish_rows`` writes rows as
records, the one way records reach ``emit``. ``FamilySampler`` captures at every tick
and oversamples; every other sampler captures once per publish interval, in ``publish``.
"""

from __future__ import annotations

import ctypes
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

from ..config import SAMPLER_OPTIONS, Option
from ..encoding import EventSchema
from ..linux.procfs import KeptOpen
from ..metrics.family import Family, Oversampler, Table, sparse_histogram_records
from ..metrics.types import Histogram

if TYPE_CHECKING:
    from ..publisher import EventHandle


#: What ``parse`` returns: per family it read, ``{labels: values}``, values in the family's
#: metric order: counter totals and gauge levels, then, for a family with a histogram,
#: the interval's non-zero buckets as ``(indices ascending, counts)`` (``h2.nonzero``).
Rows = Mapping[Family, Mapping[tuple, Sequence[Any]]]


@dataclass(frozen=True)
class Roots:
    """Filesystem roots, injectable so parsers can run against fixture trees."""

    procfs: Path = Path("/proc")
    sysfs: Path = Path("/sys")


class SharedFiles:
    """procfs files several samplers read every tick (``/proc/stat``: cpu_usage and
    scheduler), owned by the agent and handed to each sampler in its context: a file is
    opened by the first sampler that asks (``open``) and closed when the last holder
    closes its handle; ``read_at`` with the tick's stamp reads it once per tick."""

    def __init__(self) -> None:
        self._files: dict[Path, list] = {}  # path -> [KeptOpen, holders]

    def open(self, path: Path) -> SharedFile:
        """Return a handle on the file at ``path`` (raising as KeptOpen does)."""
        entry = self._files.get(path)
        if entry is None:
            entry = self._files[path] = [KeptOpen(path), 0]
        entry[1] += 1
        return SharedFile(self, path, entry[0])

    def _release(self, path: Path) -> None:
        entry = self._files[path]
        entry[1] -= 1
        if entry[1] <= 0:
            del self._files[path]
            entry[0].close()


class SharedFile:
    """One sampler's handle on a file of ``SharedFiles``."""

    __slots__ = ("_file", "_owner", "path")

    def __init__(self, owner: SharedFiles, path: Path, file: KeptOpen) -> None:
        self._owner, self.path, self._file = owner, path, file

    def read(self) -> bytes:
        """Return the file's current contents."""
        assert self._file is not None, "read after close"
        return self._file.read()

    def read_at(self, t_ns: int | None) -> bytes:
        """Return the contents as read at tick stamp ``t_ns`` (``KeptOpen.read_at``)."""
        assert self._file is not None, "read after close"
        return self._file.read_at(t_ns)

    def close(self) -> None:
        """Let go of the file (idempotent); the last holder closes it."""
        if self._file is not None:
            self._file = None
            self._owner._release(self.path)


class SamplerStatus(Protocol):
    """What the agent knows about one configured sampler (``agent.SamplerState``)."""

    name: str
    reason: str
    last_error: str
    errors: int
    refreshes: int
    cost_us: Histogram

    @property
    def state(self) -> str:
        """Return what consumers are told: idle, active, failed, unavailable, disabled."""


class AgentView(Protocol):
    """What the agent shows of itself to the sampler that publishes its health (``agent``)."""

    def stats(self) -> Mapping[str, int]:
        """Return the agent's self-statistics (rezolus_agent's counters)."""

    def sampler_states(self) -> Sequence[SamplerStatus]:
        """Return every configured sampler's state."""


@dataclass
class SamplerContext:
    """What a sampler gets from the agent."""

    roots: Roots
    options: Mapping[str, object]
    #: The agent itself, for the sampler publishing its health (None outside an agent).
    agent: AgentView | None = None
    #: Files read by several samplers, one read per tick (the agent's; else this
    #: sampler's own).
    shared: SharedFiles = field(default_factory=SharedFiles)


class Sampler(ABC):
    """One source of metrics.

    Subclasses set ``name`` and ``families`` and implement ``capture`` (the I/O) and
    ``parse`` (a capture into ``Rows``); ``publish`` writes the rows of a capture taken
    then through ``publish_rows`` (``FamilySampler`` captures in ``sample`` instead).
    ``start`` acquires resources (kept-open fds) and raises SamplerUnavailable (or OSError,
    translated by the agent) when the sampler cannot run here. The agent calls nothing
    while none of the sampler's events is enabled.
    """

    name: ClassVar[str]
    families: ClassVar[tuple[Family, ...]]
    #: Sampler-specific options, beyond the common ones in config.SAMPLER_OPTIONS.
    options: ClassVar[tuple[Option, ...]] = ()
    #: Sample every sample_interval while a _dist event is enabled; False: only at publish
    #: (for expensive sources, e.g. many cgroups).
    oversample: ClassVar[bool] = True
    #: Where it reads from, as the README's sampler table says it.
    origin: ClassVar[str] = "procfs, sysfs"

    def __init__(self, ctx: SamplerContext) -> None:
        self.ctx = ctx
        self.handles: dict[str, EventHandle] = {}
        self._words: list[ctypes.c_uint32] = []
        self._dist_words: list[ctypes.c_uint32] = []
        self._family_words: list[tuple[Family, ctypes.c_uint32 | None,
                                       ctypes.c_uint32 | None]] = []
        #: Extra status detail shown by `check` and `events` (e.g. a family unavailable).
        self.detail = ""
        #: The families to read during the current sample() call (None: outside one).
        self._reading: set[Family] | None = None

    @classmethod
    def events(cls) -> tuple[EventSchema, ...]:
        """Return every event this sampler publishes."""
        return tuple(s for f in cls.families for s in f.schemas)

    def option(self, key: str) -> object:
        """Return option ``key``: as configured, else its declared default (converted)."""
        if key in self.ctx.options:
            return self.ctx.options[key]
        for o in (*SAMPLER_OPTIONS, *self.options):
            if o.key == key:
                return o.convert(o.default)
        raise KeyError(f"sampler {self.name} declares no option {key!r}")

    def int_option(self, key: str) -> int:
        """Return an "int" or "duration" option."""
        value = self.option(key)
        if not isinstance(value, int) or isinstance(value, bool):
            raise TypeError(f"option {self.name}.{key} is {value!r}, not an int")
        return value

    def bool_option(self, key: str) -> bool:
        """Return a "bool" option."""
        value = self.option(key)
        if not isinstance(value, bool):
            raise TypeError(f"option {self.name}.{key} is {value!r}, not a bool")
        return value

    def str_option(self, key: str) -> str:
        """Return a "path" or "choice" option."""
        value = self.option(key)
        if not isinstance(value, str):
            raise TypeError(f"option {self.name}.{key} is {value!r}, not a string")
        return value

    def strings_option(self, key: str) -> tuple[str, ...]:
        """Return a "strings" option."""
        value = self.option(key)
        if not isinstance(value, list | tuple) or not all(isinstance(v, str) for v in value):
            raise TypeError(f"option {self.name}.{key} is {value!r}, not a list of strings")
        return tuple(value)

    def start(self) -> None:  # noqa: B027 - optional hook
        """Acquire what sample/publish need; raise SamplerUnavailable when it cannot run."""

    def verify(self) -> None:  # noqa: B027 - optional hook
        """Check, beyond ``start``, what would otherwise fail only at the first activation
        (BPF samplers: the verifier). ``rezolus-ue check`` calls it after ``start``."""

    def bind(self, handles: Mapping[str, EventHandle]) -> None:
        """Receive the registered handles of this sampler's events (keyed by event name)."""
        self.handles = dict(handles)
        self._words = [h.word for h in self.handles.values()]
        #: Per family: (family, its event's enable word, its _dist event's), None where
        #: the event is not registered; read every tick, so built once here.
        self._family_words = [
            (f, self._word(f.schema), self._word(f.dist_schema)) for f in self.families]
        self._dist_words = [dw for _f, _w, dw in self._family_words if dw is not None]

    def _word(self, schema: EventSchema | None) -> ctypes.c_uint32 | None:
        h = self.handles.get(schema.name) if schema is not None else None
        return h.word if h is not None else None

    @property
    def enable_words(self) -> list[ctypes.c_uint32]:
        """Return the enable words of this sampler's registered events."""
        return self._words

    @property
    def wanted(self) -> bool:
        """Return True while any consumer has any of this sampler's events enabled."""
        # Checked for every sampler every tick: read the enable words directly, in a plain
        # loop (any() over a generator costs a frame per call).
        for w in self._words:  # noqa: SIM110 - see above
            if w.value:
                return True
        return False

    @property
    def dist_wanted(self) -> bool:
        """Return True while a consumer has one of this sampler's _dist events enabled."""
        if self.oversample:
            for w in self._dist_words:
                if w.value:
                    return True
        return False

    def family_wanted(self, family: Family) -> bool:
        """Return True if ``family`` is to be read now.

        Inside ``FamilySampler.sample`` this is decided once per tick: on publish ticks
        every family with an enabled event, in between only those whose _dist event is
        enabled. Elsewhere: whether either of the family's events is enabled.
        """
        now = self._reading
        if now is not None:
            return family in now
        return any(self.handles[s.name].word.value for s in family.schemas
                   if s.name in self.handles)

    def wanted_families(self) -> set[Family]:
        """Return the families with an event (either) a consumer has enabled."""
        return {f for f, w, dw in self._family_words
                if (w is not None and w.value) or (dw is not None and dw.value)}

    def activate(self) -> None:  # noqa: B027 - optional hook
        """A consumer arrived: acquire what only consumed sampling needs (attach BPF)."""

    def activate_async(self) -> None:
        """Begin ``activate`` without blocking the agent (BPF samplers load in a thread);
        ``poll_activation`` says when it is done."""
        self.activate()

    def poll_activation(self) -> bool:
        """Return True once activated (False: still activating); raise what activating
        raised (RezolusError: the sampler cannot run here)."""
        return True

    def deactivate(self) -> None:  # noqa: B027 - optional hook
        """The last consumer left: release it again (detach BPF programs)."""

    def sample(self, t_ns: int, full: bool = True) -> None:  # noqa: B027 - optional hook
        """Read the sources once (monotonic time ``t_ns``).

        ``full`` is True on publish ticks; between them only oversampled data is needed.
        """

    def capture(self) -> Any:
        """Read the sources of the wanted families (``family_wanted``); return what
        ``parse`` needs. I/O only: no parsing beyond what choosing the reads needs."""
        raise NotImplementedError(f"sampler {self.name} has no capture")

    def parse(self, raw: Any) -> Rows:
        """Return the rows of a ``capture``; called once per capture, in capture order."""
        raise NotImplementedError(f"sampler {self.name} has no parse")

    def publish(self) -> None:
        """Write the interval's records for the enabled events: here, those of a capture
        taken now (samplers that read once per publish interval)."""
        self.publish_rows(self.parse(self.capture()))

    def publish_rows(self, rows: Rows,
                     dist: Mapping[Family, Iterable[Sequence[object]]] | None = None) -> None:
        """Write ``rows`` (``Rows``) as their families' records, and ``dist`` (records of
        each family's _dist event, the oversampler's): every sampler publishes through
        here. A record is the labels, then the values; a histogram's buckets become the
        H2 fields (``sparse_histogram_records``: count, percentiles, parts)."""
        for fam, by_labels in rows.items():
            schema = fam.schema
            if fam.histogram is None:
                self.emit(schema, by_labels.records() if isinstance(by_labels, Table) else
                          ((*k, *v) for k, v in by_labels.items()))
            else:
                self.emit(schema, (rec for k, v in by_labels.items()
                                   for rec in sparse_histogram_records(schema, k, v[:-1],
                                                                       *v[-1])))
            if dist is not None:
                self.emit(fam.dist_schema, dist.get(fam, ()))

    def emit(self, schema: EventSchema | None, records: Iterable[Sequence[object]]) -> None:
        """Pack and write ``records`` to ``schema``'s event while a consumer has it enabled;
        otherwise ``records`` (a generator, so nothing is computed) is not consumed."""
        h = self.handles.get(schema.name) if schema is not None else None
        if schema is None or h is None or not h.word.value:
            return
        pack, write = schema.pack, h.write
        for r in records:
            write(pack(*r))

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release what start acquired."""

    @classmethod
    def summary(cls) -> str:
        """Return the first line of the sampler's docstring."""
        return (cls.__doc__ or "").strip().splitlines()[0]


class Unchanged:
    """The last bytes a source gave and what parsing them gave, returned again while the
    bytes do not change: between two 100 ms samples most procfs files of a quiet host do
    not (measured on the reference VM, 99 pairs: diskstats, net/snmp, net/netstat and PSI
    memory 99 unchanged, meminfo 87, vmstat 77; /proc/stat and softirqs 0). Only for
    parses whose result, and whatever state they keep, depend on the bytes alone."""

    __slots__ = ("_raw", "_result")

    def __init__(self) -> None:
        self._raw: object = None
        self._result: object = None

    def parse(self, raw: object, parse: Callable[[Any], Any]) -> Any:
        """Return ``parse(raw)``, or its last result if ``raw`` equals the last raw."""
        if raw is not None and raw == self._raw:
            return self._result
        self._result = result = parse(raw)
        self._raw = raw
        return result


class FamilySampler(Sampler):
    """A sampler that reads rows of counters and gauges (procfs, sysfs, netlink, perf),
    captured at every tick: ``capture`` (the I/O) and ``parse`` (turning a capture into
    ``Rows``, in capture order).

    ``parse`` returns, for each family it could read this time, ``{labels: values}`` with
    values in the family's scalar order (counter totals, gauge levels); ``read`` is both
    at once. Oversampling, rates and percentiles are handled here; both events of each
    family are written by ``publish_rows``.

    Between publish ticks a sampler only captures; its captures are parsed in one pass at
    the publish tick. Why: the agent sleeps between ticks, so each sample's Python runs
    with cold caches, at 1.6 to 6 times the cost of the same code run again at once
    (reference VM, per sampler); ten parses in a row pay that about once. Measured with the
    procfs samplers interleaved in one run: 1.26% of a core parsing at every 100 ms sample,
    1.09% capturing only. The records are the same, as every capture keeps its own time
    stamp.
    """

    #: Captures kept between publish ticks before they are parsed anyway (a bound, should
    #: publish ticks stop coming: 10 s at the shortest sample_interval).
    MAX_PENDING: ClassVar[int] = 100

    def __init__(self, ctx: SamplerContext) -> None:
        super().__init__(ctx)
        self._over = {f: Oversampler(f) for f in self.families}
        self._fresh: set[Family] = set()
        #: The agent tick's time stamp while ``read`` runs inside ``sample`` (else None):
        #: samplers sharing a file (``ctx.shared``) read it once per tick with ``read_at``.
        self._sample_ns: int | None = None
        #: (t_ns, families whose _dist event was enabled, capture) not parsed yet.
        self._pending: list[tuple[int, set[Family], object]] = []

    def read(self) -> Mapping[Family, Mapping[tuple, Sequence[int]]]:
        """Return one sample of every wanted family this sampler can read."""
        return self.parse(self.capture())

    @abstractmethod
    def capture(self) -> Any:
        """Read the sources of the wanted families (``family_wanted``); return what
        ``parse`` needs. I/O only: no parsing beyond what choosing the reads needs."""

    @abstractmethod
    def parse(self, raw: Any) -> Mapping[Family, Mapping[tuple, Sequence[int]]]:
        """Return the rows of a ``capture``; called once per capture, in capture order
        (the captures between two publish ticks are parsed at the second)."""

    def sample(self, t_ns: int, full: bool = True) -> None:
        dist = set()
        reading = set()
        for f, word, dist_word in self._family_words:
            if dist_word is not None and dist_word.value:
                dist.add(f)
                reading.add(f)
            elif full and word is not None and word.value:
                reading.add(f)
        self._reading, self._sample_ns = reading, t_ns
        try:
            if reading:
                self._pending.append((t_ns, dist, self.capture()))
        finally:
            self._reading = self._sample_ns = None
        if full or len(self._pending) >= self.MAX_PENDING:
            # Swapped out first: a capture that fails to parse is not parsed again.
            pending, self._pending = self._pending, []
            for t, d, raw in pending:
                self._add(t, self.parse(raw), d)

    def deactivate(self) -> None:
        """The last consumer left: forget the interval in progress, so that the first
        records after the next consumer arrives summarise only samples taken for it."""
        self._pending.clear()
        self._fresh.clear()
        self._over = {f: Oversampler(f) for f in self.families}

    def _add(self, t_ns: int, rows_by_family: Mapping[Family, Mapping[tuple, Sequence[int]]],
             dist: set[Family]) -> None:
        for fam, rows in rows_by_family.items():
            self._over[fam].add(t_ns, rows, fam in dist)
            self._fresh.add(fam)

    def publish(self) -> None:
        # Only families sampled since the last publish: a family nobody wants is not read.
        fresh, self._fresh = self._fresh, set()
        rows, dist = {}, {}
        for fam in fresh:
            rows[fam], dist[fam] = self._over[fam].interval()
        self.publish_rows(rows, dist)
