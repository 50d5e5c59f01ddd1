"""A small machine for ``rezolus-ue top``'s in-process tests: one agent tick's records,
built from the real schemas (packed, then unpacked, as the subscription decodes them), with
counters that advance by chosen amounts; the expected figures in the tests are worked out
by hand from these records."""

from __future__ import annotations

import dataclasses

from rich.console import Console

from rezolus_ue import schema
from rezolus_ue.consume.records import Record
from rezolus_ue.consume.top.frame import Model
from rezolus_ue.consume.top.keys import UiState
from rezolus_ue.consume.top.registry import PANELS, new_model
from rezolus_ue.consume.top.screen import render
from rezolus_ue.metrics import h2
from rezolus_ue.metrics.family import histogram_records

S = 1_000_000_000
GiB = 1 << 30
MiB = 1 << 20
#: Every event, and those of top's panels whose sampler the catalog does not list (yet).
SCHEMAS = {**{s.name: s for p in PANELS for r in p.reads for s in r.family.schemas},
           **schema.by_name()}


def rec(event: str, t_ns: int, *values: object) -> Record:
    """Return a record of ``event`` as the subscription delivers it: packed, then decoded."""
    sch = SCHEMAS[event]
    return Record(event, t_ns, 0, 4242, sch.unpack(sch.pack(*values)))


def hist_recs(event: str, t_ns: int, labels: tuple, scalars: tuple, values: list[int]
              ) -> list[Record]:
    """Return the record(s) of a histogram event whose interval saw ``values``."""
    sch = SCHEMAS[event]
    counts = h2.new_counts()
    h2.record(counts, values)
    return [Record(event, t_ns, 0, 4242, sch.unpack(sch.pack(*r)))
            for r in histogram_records(sch, labels, scalars, counts)]


class Host:
    """A small machine whose counters advance by chosen amounts each interval."""

    def __init__(self, ncpu: int = 2, cgroups: int = 3) -> None:
        self.ncpu = ncpu
        self.t = 1000 * S
        # Per CPU: user nice system idle iowait irq softirq steal (ns since boot).
        self.cpu = [[50 * S, 1 * S, 20 * S, 900 * S, 5 * S, 1 * S, 2 * S, 0] for _ in
                    range(ncpu)]
        self.sched = [1_000_000, 5000]
        self.disk = {"nvme0n1": [1000, 2000, 0, 0, 10 * MiB, 20 * MiB, 0, 5 * S, 6 * S, 7 * S],
                     "sda": [10, 20, 0, 0, 1 * MiB, 2 * MiB, 0, 1 * S, 1 * S, 1 * S]}
        self.net = {"eth0": [100 * MiB, 50 * MiB, 100_000, 80_000, 0, 0, 0, 0],
                    "lo": [1 * MiB, 1 * MiB, 1000, 1000, 0, 0, 0, 0]}
        self.cg = {f"system.slice/svc{i}.service": [i * S, i * S // 2, i * S // 2, 0, 0,
                                                    (i + 1) * 100 * MiB, 0, 0, 0, 0]
                   for i in range(cgroups)}
        self.agent_cpu = [1 * S, S // 2]
        self.written = 1000
        # PSI stall totals (us) of cpu, memory, io: some, full.
        self.psi = {"cpu": [0, 0], "memory": [0, 0], "io": [0, 0]}
        #: Each sampler's (state, reason, last_error, errors), as rezolus_agent_status says.
        self.status = {"cpu_usage": ("active", "", "", 0), "memory": ("active", "", "", 0)}

    def advance(self, cpu: list[list[int]] | None = None, dt: int = S) -> None:
        """Move time on by ``dt``; add ``cpu[i]`` (8 state deltas) to each CPU."""
        self.t += dt
        idle = [dt // 10, 0, 0, dt - dt // 10, 0, 0, 0, 0]  # 10% busy unless told
        for i, d in enumerate(cpu or [idle] * self.ncpu):
            self.cpu[i] = [a + b for a, b in zip(self.cpu[i], d, strict=True)]
        self.sched[0] += 12_000
        self.sched[1] += 4
        for name, inc in (("nvme0n1", (100, 200, 4 * MiB, 8 * MiB, S // 2)),
                          ("sda", (0, 1, 0, 4096, S // 100))):
            if name not in self.disk:
                continue
            d = self.disk[name]
            d[0] += inc[0]
            d[1] += inc[1]
            d[4] += inc[2]
            d[5] += inc[3]
            d[7] += inc[0] * 1_000_000  # 1 ms per read
            d[8] += inc[1] * 2_000_000  # 2 ms per write
            d[9] += inc[4]
        n = self.net["eth0"]
        n[0] += 10 * MiB
        n[1] += 1 * MiB
        n[2] += 1000
        n[3] += 500
        n[6] += 3
        for i, v in enumerate(self.cg.values()):
            v[0] += i * S // 4  # svc0 0%, svc1 25%, svc2 50% of a CPU
            v[1] += i * S // 8
            v[2] += i * S // 8
            v[6] += i * MiB
        self.agent_cpu[0] += S // 100
        self.written += 500
        # cpu: some task stalled 5% of the time; io: 20% some, 10% full.
        for res, (some, full) in (("cpu", (0.05, 0)), ("memory", (0, 0)), ("io", (0.2, 0.1))):
            self.psi[res][0] += int(some * dt / 1000)
            self.psi[res][1] += int(full * dt / 1000)

    def records(self, dist_max: dict[int, int] | None = None) -> list[Record]:
        """Return one agent tick's records, in the order the agent writes them."""
        t = self.t
        out = []
        for i, c in enumerate(self.cpu):
            out.append(rec("rezolus_cpu_usage", t, i, *c, 123_456))
        for i in range(self.ncpu):
            mx = (dist_max or {}).get(i, 0)
            out.append(rec("rezolus_cpu_usage_dist", t + 10, i, "busy_ppm", mx // 2, 0, 0, 0,
                           mx))
        out.append(rec("rezolus_scheduler", t + 20, *self.sched, 3, 1))
        out.append(rec("rezolus_memory", t + 30, 16 * GiB, 2 * GiB, 12 * GiB, 256 * MiB,
                       6 * GiB, 12 * MiB, 0, 512 * MiB, 2 * GiB, 2 * GiB))
        for res, (some, full) in self.psi.items():  # avg10: 3% some, 1% full everywhere
            out.append(rec("rezolus_pressure", t + 35, res, 30_000, 10_000, some, full))
        for name, d in self.disk.items():
            out.append(rec("rezolus_blockio_device", t + 40, name, *d, 2))
        for name, d in self.net.items():
            out.append(rec("rezolus_network_interface", t + 50, name, *d))
        for name, d in self.cg.items():
            out.append(rec("rezolus_cgroup", t + 60, name, *d))
        out.append(rec("rezolus_agent", t + 70, 4242, (self.t - 900 * S), *self.agent_cpu,
                       48 * MiB, 12, 2, self.written, 0, 0, 0, 6, 1))
        out += hist_recs("rezolus_agent_sampler", t + 80, ("cpu_usage",), (1, 10, 0),
                         [100, 120, 130, 400, 1000])
        out += hist_recs("rezolus_agent_sampler", t + 81, ("memory",), (1, 10, 0), [50] * 4)
        for name, st in self.status.items():
            out.append(rec("rezolus_agent_status", t + 82, name, *st))
        return out


def two_intervals(ncpu: int = 2, cgroups: int = 3) -> Model:
    """Return a model fed two agent ticks one second apart (the worked example)."""
    host = Host(ncpu, cgroups)
    m = new_model(1.0, host="testhost", kernel="6.8.0-test")
    m.ingest(host.records())
    m.flush()
    # CPU0: user 300ms nice 0 system 100ms idle 550ms iowait 50ms -> busy 40.0%
    # CPU1: user 900ms system 50ms irq 10ms softirq 10ms idle 30ms -> busy 97.0%
    host.advance([[300_000_000, 0, 100_000_000, 550_000_000, 50_000_000, 0, 0, 0],
                  [900_000_000, 0, 50_000_000, 30_000_000, 0, 10_000_000, 10_000_000, 0]]
                 + [[S // 10, 0, 0, S * 9 // 10, 0, 0, 0, 0]] * (ncpu - 2))
    m.ingest(host.records(dist_max={0: 870_000, 1: 1_000_000}))
    m.flush()
    return m


def text_of(model: Model, width: int = 80, height: int = 24, ui: UiState | None = None
            ) -> str:
    con = Console(width=width, height=height, record=True, color_system=None,
                  force_terminal=False)
    con.print(render(model, width, height, ui or UiState()))
    return con.export_text()


def slow_ticks(m: Model, host: Host, ticks: int, bursts: int = 4, gap: int = 800_000_000
               ) -> None:
    """Feed ``ticks`` agent ticks, each in ``bursts`` bursts ``gap`` apart with quiet
    between (flush), as a slow agent delivers them: under emulation, BPF samplers loading
    in the background spread one tick's records over seconds."""
    for _ in range(ticks):
        recs = host.records()
        n = -(-len(recs) // bursts)
        for k in range(bursts):
            m.ingest([dataclasses.replace(r, time_ns=r.time_ns + k * gap)
                      for r in recs[k * n : (k + 1) * n]])
            m.flush()
        host.advance(dt=bursts * gap)


def troubled_host() -> Host:
    host = Host()
    host.status.update({
        "tcp": ("unavailable", "loading tcp.bpf.o: operation not permitted: run as root, or"
                " grant CAP_BPF and CAP_PERFMON", "loading tcp.bpf.o: operation not"
                " permitted", 1),
        "network": ("failed", "", "ValueError: bad rtnetlink reply", 7),
        "cgroup": ("active", "", "OSError: [Errno 19] No such device", 2),
        "perf_hardware": ("disabled", "disabled in config", "", 0),
    })
    return host


def feed(host: Host, ticks: int = 2, m: Model | None = None) -> Model:
    m = m or new_model(1.0)
    for _ in range(ticks):
        m.ingest(host.records())
        m.flush()
        host.advance()
    return m
