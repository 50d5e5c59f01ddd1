"""The agent's own cost and health, and every sampler's status and refresh cost.

Sources: ``os.times()`` (CPU time), ``/proc/self/statm`` (RSS), ``/proc/self/stat``
(threads), ``/proc/self/fd`` (open fds: its size since Linux 6.2, else its entries), the
publisher's write counters and the agent's per-sampler states (status, refreshes, errors,
refresh-time histogram).
Events: ``rezolus_agent``, ``rezolus_agent_sampler`` (one per sampler per interval),
``rezolus_agent_status``, and ``rezolus_interval``: the agent itself writes it last in each
publish tick, after every sampler (``agent.Agent.tick``), so consumers know where a tick
ends (``rezolus_ue.consume.intervals``).
"""

from __future__ import annotations

from ...encoding import REL_STR, char_array
from ...metrics.family import Family, Label, counter, gauge, histogram

SAMPLER = Label("sampler", char_array(24), "sampler name (config section)")

AGENT = Family(
    "rezolus_agent", __name__,
    "The agent's own health and cost. Counters are cumulative since the agent started;"
    " events_written counts records written before this one.",
    (),
    (
        gauge("pid", "pid", "process id of the agent", dist=False),
        counter("uptime_ns", "ns", "time since the agent started", dist=False),
        counter("cpu_user_ns", "ns", "agent CPU time in user mode", dist=False),
        counter("cpu_system_ns", "ns", "agent CPU time in kernel mode", dist=False),
        gauge("rss_bytes", "bytes", "agent resident set size", dist=False),
        gauge("fds", "fds", "open file descriptors", dist=False),
        gauge("threads", "threads", "threads", dist=False),
        counter("events_written", "records", "records written (to user_events, or handed"
                " to the uprobe stub)", dist=False),
        counter("ebadf_races", "records", "writes dropped because a consumer left between"
                " the enable check and the write (EBADF, benign)", dist=False),
        counter("write_errors", "records", "writes that failed for another reason",
                dist=False),
        counter("sampler_errors", "errors", "errors of all samplers together (the sum of"
                " rezolus_agent_sampler.errors): calls that raised, and activations that"
                " found a sampler cannot run here", dist=False),
        gauge("samplers_active", "samplers", "samplers with at least one consumer",
              dist=False),
        gauge("samplers_unavailable", "samplers", "samplers that cannot run here",
              dist=False),
    ),
)

#: What a sampler is doing, as rezolus_agent_status.state and status.json name it, with
#: the code rezolus_agent_sampler.status gives each.
STATUS_CODES = {"idle": 0, "active": 1, "unavailable": 2, "disabled": 3, "failed": 4}

#: Errors a sampler counts (rezolus_agent_sampler.errors, rezolus_agent_status.errors).
_SAMPLER_ERRORS = ("errors since the agent started: calls that raised (sample, publish,"
                   " activate, deactivate) and an activation that found the sampler cannot run"
                   " here; all samplers' add up to rezolus_agent.sampler_errors")

AGENT_SAMPLER = Family(
    "rezolus_agent_sampler", __name__,
    "Each sampler's status and refresh cost (rezolus_agent_status says why, in words).",
    (SAMPLER,),
    (
        gauge("status", "enum", "0 idle (no consumer), 1 active, 2 unavailable, 3 disabled,"
              " 4 failed (its latest call raised)", dist=False),
        counter("refreshes", "refreshes", "sample and publish calls", dist=False),
        counter("errors", "errors", _SAMPLER_ERRORS, dist=False),
        histogram("refresh_us", "us", "wall time of one refresh"),
    ),
)

#: Longest text of a reason or error, in bytes (the record holds one more, the NUL).
STATUS_TEXT_MAX = 511

SAMPLER_STATE = Label("state", char_array(12), "idle (no consumer), active (sampling), failed"
                      " (active or activating, but its latest call raised; tried again every"
                      " interval), unavailable (cannot run here) or disabled (in the config)")
REASON = Label("reason", REL_STR, "why it is unavailable or disabled, or what it is doing"
               " (e.g. how its BPF programs attach); often empty while idle or active",
               max_len=STATUS_TEXT_MAX + 1)
LAST_ERROR = Label("last_error", REL_STR, "its latest error, one line, kept after it"
                   " recovers (empty: none yet); the failed state's reason",
                   max_len=STATUS_TEXT_MAX + 1)

AGENT_STATUS = Family(
    "rezolus_agent_status", __name__,
    "Each sampler's state and, in words, why: which samplers are failing or cannot run"
    " here, with their errors. The agent's status.json (`rezolus-ue events`) says the same.",
    (SAMPLER, SAMPLER_STATE, REASON, LAST_ERROR),
    (gauge("errors", "errors", "as rezolus_agent_sampler.errors (a level here, labelled"
           " with the state and reason): " + _SAMPLER_ERRORS, dist=False),),
)

INTERVAL = Family(
    "rezolus_interval", __name__,
    "The end of one publish tick: written after every other record of the tick, so a"
    " consumer knows the tick's records are complete (and, from records, whether some were"
    " lost) without waiting for the next. Consumers read it implicitly.",
    (),
    (
        counter("seq", "ticks", "publish tick number since the agent started (0: the first)",
                dist=False),
        gauge("interval_ns", "ns", "the configured publish interval", dist=False),
        gauge("records", "records", "records the agent wrote in this tick before this one,"
              " for every consumer together", dist=False),
    ),
)

#: This sampler's families, in documentation order.
FAMILIES: tuple[Family, ...] = (AGENT, AGENT_SAMPLER, AGENT_STATUS, INTERVAL)
