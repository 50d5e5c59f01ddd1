"""The agent loop: start samplers, register their events, sample only while consumed.

Each tick the agent reads every sampler's enable words (a memory read per event) and
calls a sampler only while one of its events has a consumer, so with nobody listening it
reads no procfs file and writes nothing. A sampler that cannot start, or that raises, is reported
and disabled; it never stops the others.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import logging
import os
import resource
import select
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from operator import attrgetter
from pathlib import Path

from .bpf.loader import release_probes
from .config import Config
from .errors import RezolusError, SamplerUnavailable
from .metrics.types import Histogram
from .otel import wire
from .publisher import Publisher, open_publisher
from .samplers import REGISTRY, Roots, Sampler, SamplerContext
from .samplers.agent import INTERVAL
from .samplers.base import SharedFiles

log = logging.getLogger("rezolus_ue")

#: The value of an enable word (a ctypes.c_uint32), read in C by map().
_VALUE = attrgetter("value")

#: Events applications publish (``rezolus_ue.otel``). On user_events each registers its
#: own; the uprobe transport needs a root process to define them, so the agent does.
APP_EVENTS = (wire.SCHEMA,)
#: The agent's tick record, which it writes itself after every sampler's records of a
#: publish tick (declared with the agent sampler's families, so it is in the catalog).
TICK = INTERVAL.schema


#: Where the single-instance lock lives; override for tests or unusual systems.
RUNTIME_DIR = Path(os.environ.get("REZOLUS_UE_RUNTIME_DIR", "/run/rezolus-ue"))


def single_instance_lock(runtime_dir: Path = RUNTIME_DIR) -> int | None:
    """Return the fd holding the agent lock; raise if another agent holds it.

    Two agents would register the same events and both write every record. Returns None
    (no lock, with a debug note) when the directory cannot be created, e.g. unprivileged.
    """
    path = runtime_dir / "agent.lock"
    try:
        runtime_dir.mkdir(mode=0o755, parents=True, exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    except OSError as e:
        log.debug("no single-instance lock at %s: %s", path, e.strerror)
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as e:
        other = os.pread(fd, 32, 0).decode(errors="replace").strip() or "?"
        os.close(fd)
        if e.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
            raise RezolusError(f"another rezolus-ue agent is running (pid {other}, lock"
                               f" {path}); stop it first") from None
        raise RezolusError(f"cannot lock {path}: {e.strerror}") from None
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    return fd


def _raise_fd_limit() -> None:
    """Raise the soft open-files limit to the hard one: perf counters and cgroup files are
    kept open (several per CPU and per cgroup)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def error_text(e: BaseException) -> str:
    """Return an error as one line: a RezolusError's own text (written for users), any
    other exception's type and text (a sampler bug: the type says the most)."""
    text = e.reason if isinstance(e, SamplerUnavailable) else str(e)
    if not isinstance(e, RezolusError):
        text = f"{type(e).__name__}: {text}" if text else type(e).__name__
    return " ".join(text.split())


@dataclass
class SamplerState:
    """What the agent knows about one configured sampler."""

    name: str
    sampler: Sampler | None
    status: str  # "active" | "idle" | "unavailable" | "disabled"
    reason: str = ""
    #: Errors since the agent started (kept across reloads): calls that raised, and an
    #: activation that found the sampler cannot run. They add up to Agent.sampler_errors.
    errors: int = 0
    refreshes: int = 0
    #: The latest error's one-line text, kept after the sampler recovers.
    last_error: str = ""
    #: The latest sample/publish/activate/deactivate call raised; the next that does not
    #: clears it.
    failing: bool = False
    #: Wall time of each refresh (sample and/or publish), in microseconds.
    cost_us: Histogram = field(default_factory=Histogram)

    @property
    def state(self) -> str:
        """Return what consumers are told: the status, or "failed" while a sampler that is
        still tried (idle or active) failed its latest call."""
        return "failed" if self.failing and self.sampler is not None else self.status


class Agent:
    """Owns the publisher and the samplers; ``run`` loops until told to stop."""

    def __init__(self, config: Config, tracefs: Path, runtime_dir: Path | None = None) -> None:
        self.config = config
        self.tracefs = tracefs
        self.runtime_dir = runtime_dir
        self.publisher: Publisher | None = None
        self.states: dict[str, SamplerState] = {}
        #: Files several samplers read every tick, read once per tick (SharedFiles).
        self.shared = SharedFiles()
        self.sampler_errors = 0
        self._started_ns = time.monotonic_ns()
        self._status_key: tuple = ()
        #: Returns a freshly loaded, validated config (raises ConfigError); set to enable
        #: reloading on request_reload() (SIGHUP).
        self.reload_source: Callable[[], Config] | None = None
        self._reload_requested = False
        #: Between publish ticks, the samplers to sample while no enable word has changed
        #: since the last full pass: (every bound enable word, their values at the start of
        #: that pass, the states of the samplers it sampled). None: take the full pass.
        self._fast: tuple[list, tuple[int, ...], list[SamplerState]] | None = None
        #: Publish ticks taken (the next tick record's seq), and the publisher's write
        #: count when the previous one ended.
        self._seq = 0
        self._written_base = 0

    def start(self) -> None:
        """Open the transport and start every enabled sampler; raise if nothing can publish."""
        a = self.config.agent
        _raise_fd_limit()
        self.publisher = open_publisher(self.tracefs, str(a["transport"]),
                                        persist=bool(a["persist"]),
                                        multi_format=bool(a["multi_format"]))
        if self.publisher.transport == "uprobe":
            self._define_app_events()
        for name in REGISTRY:
            self.states[name] = self._start_sampler(name)
        self.publisher.register((TICK,))  # even with the agent sampler disabled
        release_probes()
        self._write_status()

    def _define_app_events(self) -> None:
        """Define the applications' events beside ours; warn, never fail, if it cannot."""
        assert self.publisher is not None
        try:
            self.publisher.register(APP_EVENTS)
        except RezolusError as e:
            log.warning("applications cannot publish %s here: %s",
                        ", ".join(s.name for s in APP_EVENTS), e)
            return
        log.info("defined %s for applications", ", ".join(
            f"{self.publisher.group}:{s.name}" for s in APP_EVENTS))

    def _start_sampler(self, name: str) -> SamplerState:
        """Start sampler ``name`` as configured and register its events; never raise for a
        sampler that cannot run here (its state says why)."""
        if not self.config.sampler_enabled(name):
            return SamplerState(name, None, "disabled", "disabled in config")
        a = self.config.agent
        roots = Roots(Path(str(a["procfs"])), Path(str(a["sysfs"])))
        cls = REGISTRY[name]
        ctx = SamplerContext(roots, self.config.samplers[name], self, self.shared)
        sampler = cls(ctx)
        try:
            sampler.start()
            assert self.publisher is not None
            sampler.bind(self.publisher.register(cls.events()))
        except (SamplerUnavailable, RezolusError, OSError) as e:
            with contextlib.suppress(Exception):
                sampler.close()
            reason = e.reason if isinstance(e, SamplerUnavailable) else str(e)
            log.warning("sampler %s unavailable: %s", name, reason)
            return SamplerState(name, None, "unavailable", reason)
        except Exception as e:  # a sampler bug (e.g. a parse of what it found) is its own
            with contextlib.suppress(Exception):
                sampler.close()
            st = SamplerState(name, None, "unavailable")
            self._count_error(st, error_text(e))
            st.reason = f"failed to start: {st.last_error}"
            log.error("sampler %s %s", name, st.reason)
            return st
        return SamplerState(name, sampler, "idle", sampler.detail)

    def _stop_sampler(self, st: SamplerState) -> None:
        if st.sampler is None:
            return
        try:
            if st.status == "active":
                st.sampler.deactivate()
            st.sampler.close()
        except Exception as e:
            log.debug("closing sampler %s: %s", st.name, e)

    #: Agent options a reload cannot change in a running agent (they shape the publisher
    #: and the samplers' roots): changing them needs a restart.
    RESTART_KEYS = ("tracefs", "transport", "persist", "multi_format", "procfs", "sysfs",
                    "drop_capabilities")

    def reload(self, new: Config) -> list[str]:
        """Switch to config ``new`` (already validated); return what changed.

        Samplers newly enabled start, disabled ones stop and unregister their events,
        re-tuned ones (options changed) restart bound to the same registrations, samplers
        that were unavailable are tried again; the rest keep running untouched, so
        consumers of unchanged events see no gap.
        """
        self._fast = None  # samplers and their enable words change
        old, changes = self.config, []
        for key in self.RESTART_KEYS:
            if old.agent.get(key) != new.agent.get(key):
                log.warning("reload: agent.%s changed; it takes effect at the next restart",
                            key)
        kept = {k: (new.agent[k] if k not in self.RESTART_KEYS else v)
                for k, v in old.agent.items()}
        for key in ("publish_interval", "sample_interval", "log_level"):
            if old.agent.get(key) != new.agent.get(key):
                changes.append(f"agent.{key}")
        self.config = replace(new, agent=kept)
        log.setLevel(str(kept.get("log_level", "info")).upper())
        assert self.publisher is not None
        for name in REGISTRY:
            st = self.states.get(name)
            same = (old.samplers.get(name) == new.samplers.get(name))
            if st is not None and same and st.status != "unavailable":
                continue
            if st is not None:
                self._stop_sampler(st)
            if not new.sampler_enabled(name):
                self.publisher.unregister(e.name for e in REGISTRY[name].events())
            fresh = self.states[name] = self._start_sampler(name)
            if st is not None:  # its errors stay counted: they add up to sampler_errors
                fresh.errors, fresh.last_error = st.errors, st.last_error
            what = ("removed" if not new.sampler_enabled(name) else
                    "added" if st is None or st.status == "disabled" else
                    "retried" if same else "re-tuned")
            changes.append(f"{name} {what} ({self.states[name].status})")
            if new.sampler_enabled(name):
                _warn_unheld(name)
        self.publisher.register((TICK,))  # the agent sampler's removal took it
        self._write_status()
        return changes

    @property
    def event_names(self) -> list[str]:
        """Return the names of the samplers' registered events."""
        apps = {e.name for e in APP_EVENTS}
        return [n for n in self.publisher.handles if n not in apps] if self.publisher else []

    def sampler_states(self) -> list[SamplerState]:
        """Return every configured sampler's state (for the agent sampler)."""
        return list(self.states.values())

    def stats(self) -> dict[str, int]:
        """Return the self-metrics published in rezolus_agent."""
        s = self.publisher.stats if self.publisher else None
        states = self.states.values()
        return {
            "uptime_ns": time.monotonic_ns() - self._started_ns,
            "events_written": s.written if s else 0,
            "ebadf_races": s.ebadf if s else 0,
            "write_errors": s.errors if s else 0,
            "sampler_errors": self.sampler_errors,
            "samplers_active": sum(st.status == "active" for st in states),
            "samplers_unavailable": sum(st.status == "unavailable" for st in states),
        }

    def tick(self, now_ns: int, publishing: bool) -> bool:
        """Sample (and on publish ticks, publish) every sampler with a consumer.

        Return True when some sampler is oversampling (wants the next sample_interval).
        """
        fast = self._fast
        if not publishing and fast is not None:
            words, values, plan = fast
            if tuple(map(_VALUE, words)) == values:
                for st in plan:
                    self._refresh(st, now_ns, False)
                return bool(plan)
        # The full pass: every sampler's enable words, activation and status.
        words = [w for st in self.states.values() if st.sampler is not None
                 for w in st.sampler.enable_words]
        values = tuple(map(_VALUE, words))
        plan: list[SamplerState] = []  # the samplers oversampling
        settled = True
        for st in self.states.values():
            sampler = st.sampler
            if sampler is None:
                continue
            if not sampler.wanted:
                if st.status == "active":
                    log.info("%s: no consumer left, idle", st.name)
                    self._call(st, sampler.deactivate)
                    st.reason = sampler.detail
                st.status = "idle"
                continue
            if st.status != "active":
                log.info("%s: consumer attached, sampling", st.name)
                try:
                    ok = self._call(st, sampler.activate_async)
                except (SamplerUnavailable, RezolusError) as e:
                    self._make_unavailable(st, e)
                    settled = False
                    continue
                st.reason = sampler.detail
                if not ok:
                    settled = False
                    continue  # retried next tick
            st.status = "active"
            try:
                if not sampler.poll_activation():
                    settled = False
                    continue  # BPF programs still loading: the other samplers go on
            except (SamplerUnavailable, RezolusError) as e:
                self._make_unavailable(st, e)
                settled = False
                continue
            dist = sampler.dist_wanted
            if dist:
                plan.append(st)
            if not (dist or publishing):
                continue
            self._refresh(st, now_ns, publishing)
            st.reason = sampler.detail  # samplers update it as they learn (e.g. cgroup)
        # Until an enable word changes, the next sample ticks need only sample the same
        # samplers: no status, activation or enable checks sampler by sampler (at 100 ms
        # sampling they ran nine times a second, right after a sleep, with cold caches).
        self._fast = (words, values, plan) if settled else None
        if publishing:
            self._end_tick()
        if publishing or not self._status_key:
            # Status changes between publish ticks reach status.json at the next one (at
            # most publish_interval late): no per-tick tuple of every sampler's status.
            self._write_status()
        return bool(plan)

    def _end_tick(self) -> None:
        """Write the tick record (while a consumer has it enabled): the tick's seq, the
        publish interval and the records written since the previous tick ended."""
        pub = self.publisher
        if pub is None:
            return
        stats = pub.stats
        written = stats.written if stats is not None else 0
        h = pub.handles.get(TICK.name)
        if h is not None and h.word.value:
            h.write(TICK.pack(self._seq, self.config.publish_interval_ns,
                              written - self._written_base))
            written = stats.written if stats is not None else 0
        self._seq += 1
        self._written_base = written

    def _refresh(self, st: SamplerState, now_ns: int, publishing: bool) -> None:
        """Sample (and on publish ticks, publish) one active sampler; count and time it,
        and count (and log, rate-limited) a failure instead of raising."""
        sampler = st.sampler
        assert sampler is not None
        t0 = time.perf_counter_ns()
        try:
            sampler.sample(now_ns, publishing)
            if publishing:
                sampler.publish()
        except Exception as e:  # a sampler bug must not stop the others
            self._failed(st, "refresh", e)
        else:
            st.failing = False
        st.refreshes += 1
        st.cost_us.record((time.perf_counter_ns() - t0) // 1000)

    def _make_unavailable(self, st: SamplerState, e: RezolusError) -> None:
        """A sampler found at activation that it cannot run here (e.g. the verifier
        rejected its BPF program): report why, release it and unregister its events."""
        reason = error_text(e)
        log.error("sampler %s unavailable: %s", st.name, reason)
        self._count_error(st, reason)
        assert st.sampler is not None
        events = [ev.name for ev in st.sampler.events()]
        with contextlib.suppress(Exception):
            st.sampler.close()
        if self.publisher is not None:
            self.publisher.unregister(events)
        st.sampler, st.status, st.reason, st.failing = None, "unavailable", reason, False

    def _call(self, st: SamplerState, hook) -> bool:  # type: ignore[no-untyped-def]
        """Run an activate/deactivate hook; count and log a failure instead of raising,
        except RezolusError from activate: the sampler cannot run (the caller decides)."""
        try:
            hook()
        except RezolusError as e:
            if hook.__name__ in ("activate", "activate_async"):
                raise
            self._failed(st, hook.__name__, e)
            return False
        except Exception as e:
            self._failed(st, hook.__name__, e)
            return False
        st.failing = False
        return True

    def _count_error(self, st: SamplerState, text: str) -> None:
        """Count one error of ``st`` in its own count and the agent's total (they agree)."""
        self.sampler_errors += 1
        st.errors += 1
        st.last_error = text

    def _failed(self, st: SamplerState, what: str, e: Exception) -> None:
        """Count and keep a failed call of ``st`` (its state becomes "failed" until a call
        succeeds) and log it, rate-limited."""
        self._count_error(st, error_text(e))
        st.failing = True
        if st.errors == 1 or st.errors % 100 == 0:
            log.error("sampler %s: %s failed (%d errors): %s", st.name, what, st.errors,
                      st.last_error)

    def run(self, wake_fd: int, should_stop) -> None:  # type: ignore[no-untyped-def]
        """Loop until ``should_stop()``; ``wake_fd`` interrupts the sleep.

        Publishes every publish_interval; in between, wakes every sample_interval only
        while some consumer has a _dist event enabled, so an idle agent wakes once per
        publish interval to read its enable words and nothing else.
        """
        next_pub = time.monotonic_ns()
        while not should_stop():
            if self.reload_source is not None and self._reload_requested:
                self._reload_requested = False
                self._reload()
            publish_ns = self.config.publish_interval_ns
            sample_ns = self.config.sample_interval_ns
            now = time.monotonic_ns()
            publishing = now >= next_pub
            oversampling = self.tick(now, publishing)
            if publishing:
                next_pub += publish_ns
                if next_pub <= now:  # fell behind (suspend, overload): skip, don't burst
                    next_pub = now + publish_ns
            wake = min(next_pub, now + sample_ns) if oversampling else next_pub
            timeout = max(0.0, (wake - time.monotonic_ns()) / 1e9)
            ready, _, _ = select.select([wake_fd], [], [], timeout)
            if ready:
                with contextlib.suppress(BlockingIOError):
                    os.read(wake_fd, 512)

    def request_reload(self) -> None:
        """Ask the loop to reload the config (async-signal-safe: sets a flag)."""
        self._reload_requested = True

    def _reload(self) -> None:
        """Load the config again through ``reload_source``; keep the old one if it is bad."""
        assert self.reload_source is not None
        try:
            new = self.reload_source()
        except RezolusError as e:
            log.error("reload rejected, still running the previous config: %s", e)
            return
        changes = self.reload(new)
        log.info("reloaded %s: %s", new.path or "defaults",
                 "; ".join(changes) if changes else "nothing changed")

    def _write_status(self) -> None:
        """Write the samplers' status for `rezolus-ue events` when it changed."""
        if self.runtime_dir is None:
            return
        key = tuple((st.name, st.state, st.reason, st.errors, st.last_error)
                    for st in self.states.values())
        if key == self._status_key:
            return
        self._status_key = key
        doc = {
            "pid": os.getpid(),
            "transport": self.publisher.transport if self.publisher else None,
            "samplers": {name: {"status": state, "reason": reason, "errors": errors,
                                "last_error": last_error}
                         for name, state, reason, errors, last_error in key},
        }
        tmp = self.runtime_dir / f".status.{os.getpid()}"
        try:
            tmp.write_text(json.dumps(doc))
            os.replace(tmp, self.runtime_dir / "status.json")
        except OSError as e:
            log.debug("cannot write status: %s", e)

    def close(self) -> None:
        """Close every sampler and unregister every event."""
        for st in self.states.values():
            self._stop_sampler(st)
        if self.publisher is not None:
            self.publisher.close()
        if self.runtime_dir is not None:
            with contextlib.suppress(OSError):
                (self.runtime_dir / "status.json").unlink()


def _warn_unheld(name: str) -> None:
    """Warn if sampler ``name``, (re)started by a reload, needs a capability the agent does
    not hold: it was dropped at start-up, when no sampler enabled then needed it."""
    from .privilege import declared, missing

    try:
        lacking = missing(n.cap for n in declared([name])[name])
    except (OSError, ValueError):
        return
    if lacking:
        log.warning("reload: sampler %s needs %s, which the agent does not hold (at"
                    " start-up it keeps only what the samplers enabled then need): restart"
                    " the agent", name, " and ".join(lacking))


def read_status(runtime_dir: Path = RUNTIME_DIR) -> dict | None:
    """Return the running agent's sampler status, or None if no agent is running."""
    try:
        doc = json.loads((runtime_dir / "status.json").read_text())
        pid = int(doc["pid"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    try:
        os.kill(pid, 0)
    except PermissionError:
        return doc  # alive, but another user's (e.g. root's): still the running agent
    except OSError:
        return None
    return doc
