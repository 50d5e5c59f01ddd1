"""Every command and example a reader meets in README.md, docs/*.md and the man pages.

What a newcomer copies from the docs must work and print what the docs say. This module
finds every example there, and ``EXERCISED`` says, for each one, which test runs it (and,
when a test cannot run it exactly as written, what it runs instead and why) or why no test
can. tests/test_doc_examples.py fails when an example has no entry (or an entry no
example), so a new example cannot land untested; tests/kernel/test_doc_examples.py runs
the entries against a real agent on this host's transport, and
tests/kernel/test_doc_examples_user_events.py those about user_events itself in the
kernel tier, and both check what the docs claim they print.

The agent publishes in one of two groups, ``user_events`` or ``rezolus_ue`` (the uprobe
transport; ``schema.GROUPS``). A command that names a group (``user_events:rezolus_*``,
``events/rezolus_ue/...``) works only where that transport is, so the docs show it in
both forms (``transport_of``, ``in_transport``; ``ONE_FORM`` lists the few that cannot
have a twin, with why), and each form is run as written where its transport is.

Where examples are found:

* Markdown ``console`` blocks: lines starting with ``$ `` are commands; the lines after
  one, up to the next ``$ ``, are what the docs claim it prints (checked by
  ``claim_pattern``). ``sh`` blocks: every line is a command, with no output claim.
* Markdown ``python``, ``sql``, ``toml``, ``yaml``, ``promql`` and ``ini`` blocks: each
  block is one example, named by its kind and first line.
* Man pages: every ``.EX``/``.EE`` block; one whose first line is a TOML table header
  is a configuration example, one that starts with ``rezolus-ue:`` a message the program
  prints, else each line is a command.

A trailing ``# comment`` is not part of a command; a line ending in ``\\`` continues.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from rezolus_ue.schema import GROUPS

ROOT = Path(__file__).resolve().parent.parent
#: The files a reader follows. docs/events.md and docs/samplers.md are generated
#: references without examples; docs/PERFORMANCE.md holds benchmark output only.
SOURCES = ("README.md", "docs/api.md", "docs/recording.md", "docs/prometheus.md",
           "docs/applications.md",
           "docs/security.md", "docs/kernels.md", "docs/events.md", "docs/samplers.md",
           "docs/PERFORMANCE.md", "docs/view.md", "man/rezolus-ue.8", "man/rezolus-ue.toml.5")
SHELL_LANGS = ("console", "sh")
BLOCK_LANGS = ("python", "sql", "toml", "yaml", "promql", "ini")


@dataclass(frozen=True)
class Example:
    """One command or example block, where it is and what the docs say it prints."""

    source: str          # path relative to the checkout
    line: int            # 1-based line of the command or of the block's first line
    kind: str            # "command", or the block's language
    text: str            # the command (prompt, comment and escapes removed) or block
    claims: tuple[str, ...] = ()   # output lines the docs show for a command

    @property
    def key(self) -> str:
        """Return the name ``EXERCISED`` knows this example by."""
        if self.kind == "command":
            return self.text
        first = next(ln for ln in self.text.splitlines() if ln.strip())
        return f"{self.kind}: {first.strip()}"


def strip_comment(line: str) -> str:
    """Return ``line`` without a trailing unquoted ``# comment``."""
    quote = ""
    for i, ch in enumerate(line):
        if quote:
            quote = "" if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch == "#" and (i == 0 or line[i - 1].isspace()):
            return line[:i].rstrip()
    return line.rstrip()


def _join_continuations(lines: list[tuple[int, str]]) -> list[tuple[int, str]]:
    out: list[tuple[int, str]] = []
    pending: tuple[int, str] | None = None
    for n, text in lines:
        if pending is not None:
            n, text = pending[0], pending[1] + " " + text.strip()
            pending = None
        if text.rstrip().endswith("\\"):
            pending = (n, text.rstrip()[:-1].rstrip())
            continue
        out.append((n, text))
    if pending is not None:
        out.append(pending)
    return out


def _normalise(cmd: str) -> str:
    return " ".join(cmd.split())


def _console(source: str, body: list[tuple[int, str]]) -> list[Example]:
    out: list[Example] = []
    cur: tuple[int, str] | None = None
    claims: list[str] = []
    for n, text in body:
        if text.startswith("$ "):
            if cur is not None:
                out.append(Example(source, cur[0], "command", cur[1], tuple(claims)))
            cur, claims = (n, _normalise(strip_comment(text[2:]))), []
        elif cur is not None and text.strip():
            claims.append(text.rstrip())
    if cur is not None:
        out.append(Example(source, cur[0], "command", cur[1], tuple(claims)))
    return out


def _shell(source: str, body: list[tuple[int, str]]) -> list[Example]:
    out = []
    for n, text in _join_continuations(body):
        cmd = _normalise(strip_comment(text))
        if cmd:
            out.append(Example(source, n, "command", cmd))
    return out


def markdown_examples(source: str, text: str) -> list[Example]:
    """Return the examples of a Markdown file's fenced blocks."""
    out: list[Example] = []
    lang, start, body = None, 0, []
    for n, line in enumerate(text.splitlines(), 1):
        if lang is None:
            m = re.match(r"^```(\w*)\s*$", line)
            if m:
                lang, start, body = m.group(1), n, []
            continue
        if line.startswith("```"):
            if lang == "console":
                out += _console(source, body)
            elif lang == "sh":
                out += _shell(source, body)
            elif lang in BLOCK_LANGS:
                out.append(Example(source, start + 1, lang, "\n".join(t for _, t in body)))
            lang = None
            continue
        body.append((n, line))
    return out


_ROFF = [("\\(aq", "'"), ("\\(dq", '"'), ("\\-", "-"), ("\\%", ""), ("\\&", ""),
         ("\\e", "\\")]


def unroff(line: str) -> str:
    """Return a man page ``.EX`` line as the reader sees it."""
    for esc, plain in _ROFF:
        line = line.replace(esc, plain)
    return line


#: Man page .EX blocks that are not commands: (kind, how their first line starts).
_MAN_BLOCKS = (("toml", "["), ("message", "rezolus-ue: "))


def man_examples(source: str, text: str) -> list[Example]:
    """Return the examples of a man page's ``.EX``/``.EE`` blocks."""
    out: list[Example] = []
    body: list[tuple[int, str]] | None = None
    for n, line in enumerate(text.splitlines(), 1):
        if line.startswith(".EX"):
            body = []
        elif line.startswith(".EE") and body is not None:
            lines = [(k, unroff(t)) for k, t in body]
            kind = next((k for k, head in _MAN_BLOCKS if lines and
                         lines[0][1].startswith(head)), None)
            if kind:
                out.append(Example(source, lines[0][0], kind, "\n".join(t for _, t in lines)))
            else:
                out += _shell(source, lines)
            body = None
        elif body is not None:
            body.append((n, line))
    return out


def examples(root: Path = ROOT) -> list[Example]:
    """Return every example of ``SOURCES``, in reading order."""
    out: list[Example] = []
    for rel in SOURCES:
        text = (root / rel).read_text()
        out += man_examples(rel, text) if rel.startswith("man/") else markdown_examples(rel, text)
    return out


#: An address as perf prints a probe's, without 0x: 8 or more hex digits, a digit among them.
_HEX = r"(?=[a-f]*\d)[0-9a-f]{8,}"


def claim_pattern(claim: str) -> re.Pattern[str]:
    """Return the regex an output line must match to be what ``claim`` shows.

    Numbers in a claim are examples (any number matches), and so are addresses (``0x``
    and hex, or 8 or more hex digits with a digit among them, as perf prints a probe's);
    ``...`` stands for anything, and runs of blanks for any blanks; everything else must
    be there as written.
    """
    parts = []
    for i, chunk in enumerate(claim.strip().split("...")):
        if i:
            parts.append(".*")
        for tok in re.split(rf"(0x[0-9a-f]+|\b{_HEX}\b|\d+|\s+)", chunk):
            if not tok:
                continue
            if tok.startswith("0x"):
                parts.append("0x[0-9a-f]+")
            elif not tok.isdigit() and re.fullmatch(_HEX, tok):
                parts.append("[0-9a-f]+")
            elif tok.isdigit():
                parts.append(r"\d+")
            elif tok.isspace():
                parts.append(r"\s+")
            else:
                parts.append(re.escape(tok))
    return re.compile(r"\s*" + "".join(parts) + r"\s*")


#: Claim lines that show the reader's terminal, not the program's output.
NOT_OUTPUT = ("...", "^C")


def unmatched_claims(claims: tuple[str, ...], output: str) -> list[str]:
    """Return the claims no line of ``output`` matches (a bare ``...`` claims nothing)."""
    lines = output.splitlines()
    return [c for c in claims if c.strip() not in NOT_OUTPUT
            and not any(claim_pattern(c).fullmatch(ln) for ln in lines)]


def _names(group: str) -> tuple[tuple[str, str], ...]:
    """Return how a command names ``group``'s events, as (regex, text) pairs: perf's and
    bpftrace's ``GROUP:rezolus_...`` and tracefs's ``events/GROUP/``."""
    return (rf"\b{group}:(?=rezolus_)", f"{group}:"), (rf"\bevents/{group}/", f"events/{group}/")


def transport_of(text: str) -> str | None:
    """Return the transport whose group ``text`` names, or None if it names none (it then
    works on both as written)."""
    found = [t for t, g in GROUPS.items() if any(re.search(rx, text) for rx, _ in _names(g))]
    assert len(found) <= 1, f"{text!r} names both transports' groups"
    return found[0] if found else None


def in_transport(text: str, transport: str) -> str:
    """Return ``text`` naming ``transport``'s group where it names the other one's: the
    form of the command for that transport."""
    was = transport_of(text)
    if was is None or was == transport:
        return text
    for (rx, _), (_, name) in zip(_names(GROUPS[was]), _names(GROUPS[transport]), strict=True):
        text = re.sub(rx, name, text)
    return text


#: Commands the docs show in one transport's form only: key -> why the other has none.
ONE_FORM: dict[str, str] = {
    "sudo bpftrace -e 'tracepoint:user_events:rezolus_cpu_usage { @records = count(); }'":
        "it shows that BPF programs on user_events tracepoints never run; the uprobe"
        " transport's BPF recipe is not a tracepoint (docs/kernels.md, eBPF consumers)",
}


@dataclass(frozen=True)
class Ran:
    """The example is run by ``test`` (a pytest node id). ``as_run``: what the test runs
    instead of the text as written, and ``why``, when it cannot run it verbatim."""

    test: str
    as_run: str = ""
    why: str = ""


@dataclass(frozen=True)
class NotRun:
    """No test can run the example here; ``why`` says why (and what covers it instead)."""

    why: str


#: Runs on this host's transport: the commands that name no group, and the forms naming
#: the uprobe transport's.
K = "tests/kernel/test_doc_examples.py::"
#: Runs in the kernel tier: the forms naming user_events' group, and the examples about
#: user_events itself.
KU = "tests/kernel/test_doc_examples_user_events.py::"
#: docs/applications.md's examples, run by the tests of applications on each transport:
#: on this host (uprobe tier) and in the kernel tier (user_events).
AU = "tests/uprobe/test_otel_app.py::"
AK = "tests/kernel/test_otel_user_events.py::"
#: Where each transport's forms run: on this host, or in the kernel tier.
RUN_IN = {"uprobe": (K, AU), "user_events": (KU, AK)}
PERF_WHY = ("a fixed sleep would depend on the machine's speed: the test stops perf once"
            " the example service has counted three records written")
GROUP_WHY = ("the kernel tier shares this machine's root, so the test adds no group or user"
             " there: nobody's own group gets the same access, restored after")
U = "tests/test_doc_examples.py::"
NO_SYSTEMD = ("needs systemd as PID 1, which the test VM (virtme-ng) does not boot;"
              " tests/test_service_cmd.py verifies the units with systemd-analyze")
NO_FLEET = "needs a Prometheus server scraping a fleet of hosts"
NO_QUERY = (NO_FLEET + "; the metric names it uses are checked by"
            " tests/test_doc_examples.py::test_promql_names_exist")
UNTIL_STOPPED = "it runs until stopped: the test stops it with SIGTERM once it has published"
SHORTER = "the same command with a shorter duration, so the test ends"
V = "tests/test_view.py::"
ANY_PORT = "any free port: the default one may be taken on a test machine"

#: Every example of the docs -> how it is exercised. Keys are ``Example.key``.
EXERCISED: dict[str, Ran | NotRun] = {
    # README.md: the two set-up commands.
    "./scripts/setup.sh && rezolus-ue run": Ran(
        K + "test_readme_tour", as_run="rezolus-ue run",
        why="CI runs scripts/test.sh, which runs scripts/setup.sh first; the test starts"
        " the agent that installation gives, the same way"),
    "./scripts/test.sh": NotRun("it is the test run itself: .ci/run runs it under env -i"),
    # README.md: quick tour.
    "sudo rezolus-ue check": Ran(K + "test_readme_tour"),
    "sudo rezolus-ue run &": Ran(K + "test_readme_tour"),
    "sudo rezolus-ue events": Ran(K + "test_readme_tour"),
    "sudo rezolus-ue top": Ran(K + "test_top_in_tmux", as_run="the same, in tmux, then q",
                               why="a full-screen program needs a terminal"),
    "sudo rezolus-ue record run.rzr --duration 10m": Ran(
        K + "test_recording", as_run="sudo rezolus-ue record run.rzr --duration 10s",
        why=SHORTER),
    "rezolus-ue tail --from run.rzr": Ran(K + "test_recording"),
    "sudo perf record -e 'user_events:rezolus_*' -a -- sleep 3 && sudo perf script": Ran(
        KU + "test_user_events_output_as_shown"),
    "sudo perf record -e 'rezolus_ue:rezolus_*' -a -- sleep 3 && sudo perf script": Ran(
        K + "test_readme_tour"),
    "sudo rezolus-ue tail rezolus_cpu_usage": Ran(
        K + "test_readme_tour", as_run="sudo rezolus-ue tail rezolus_cpu_usage --count 4",
        why="tail runs until interrupted"),
    "sudo rezolus-ue tail 'rezolus_memory*' --format json"
    " | jq 'select(.event == \"rezolus_memory\") | .available_bytes'": Ran(
        K + "test_readme_tour",
        as_run="timeout 120 sudo rezolus-ue tail 'rezolus_memory*' --format json"
        " | jq --unbuffered 'select(.event == \"rezolus_memory\") | .available_bytes'"
        " | head -n 2", why="tail runs until interrupted: the pipe ends after two values"),
    "sudo mkdir /sys/kernel/tracing/instances/mine": Ran(K + "test_ftrace_instance"),
    "echo rezolus_cpu_usage | sudo tee /sys/kernel/tracing/instances/mine/set_event": Ran(
        K + "test_ftrace_instance"),
    "sudo cat /sys/kernel/tracing/instances/mine/trace_pipe": Ran(
        K + "test_ftrace_instance", as_run="the same under timeout 60, through head -n 2",
        why="trace_pipe is read until interrupted"),
    "sudo rmdir /sys/kernel/tracing/instances/mine": Ran(K + "test_ftrace_instance"),
    "sudo trace-cmd record -e rezolus_cpu_usage sleep 5": Ran(KU + "test_trace_cmd"),
    "sudo trace-cmd report": Ran(KU + "test_trace_cmd"),
    "sudo bpftrace -e 'tracepoint:user_events:rezolus_cpu_usage { @records = count(); }'": Ran(
        KU + "test_bpftrace_sees_no_record",
        as_run="the same with an interval:s:5 { exit(); } probe",
        why="bpftrace runs until interrupted"),
    "sudo rezolus-ue run -c bad.toml": Ran(K + "test_readme_tour"),
    "sudo git clone . /opt/rezolus-ue && cd /opt/rezolus-ue": NotRun(
        "installs into this machine's /opt; the checkout CI tests is such a clone"),
    "sudo ./scripts/setup.sh": NotRun("CI runs it (scripts/test.sh starts with it)"),
    "sudo .venv/bin/rezolus-ue install-service": Ran(
        U + "test_install_service_as_the_readme_says", as_run="the same with --root TMPDIR",
        why="it writes /etc and /usr/local of this machine"),
    "sudo systemctl daemon-reload": NotRun(NO_SYSTEMD),
    "sudo systemctl enable --now rezolus-ue.service rezolus-ue-exporter.service": NotRun(
        NO_SYSTEMD),
    ".venv/bin/python bench/publish.py": NotRun(
        "a benchmark (minutes, figures only); tests/test_bench_smoke.py runs its parts"),
    ".venv/bin/python bench/publish.py --vm ../shared/vmkernel/bzImage": NotRun(
        "a benchmark booting its own VM; tests/test_bench_smoke.py runs its parts"),
    ".venv/bin/python bench/collect.py": NotRun(
        "a benchmark (minutes, figures only); tests/test_bench_smoke.py runs its parts"),
    ".venv/bin/python bench/scale.py": NotRun(
        "a benchmark (minutes, figures only); tests/test_bench_smoke.py runs its parts"),
    ".venv/bin/python bench/memory.py": NotRun(
        "a benchmark (figures only); tests/test_bench_smoke.py runs it with --quick"),
    ".venv/bin/python bench/memory.py --profiles": NotRun(
        "a benchmark (figures only); tests/test_bench_smoke.py runs its agent process on a"
        " small host"),
    ".venv/bin/python bench/top.py": NotRun(
        "a benchmark (figures only); tests/test_top.py covers the frames it times"),
    ".venv/bin/python bench/rezolus_compare.py --rezolus ~/src/rezolus": NotRun(
        "needs a Rezolus checkout; tests/test_bench_smoke.py runs it with REZOLUS_SRC set"
        " and checks its one-line skip without"),
    ".venv/bin/python bench/all.py --vm ../shared/vmkernel/bzImage": NotRun(
        "every benchmark (~30 min) and a VM; tests/test_bench_smoke.py checks its"
        " extraction and rendering"),
    # docs/recording.md
    "sudo rezolus-ue record cpu.rzr 'rezolus_cpu*'": Ran(
        K + "test_recording", as_run="the same with --duration 5s", why="it records until"
        " interrupted"),
    "sudo rezolus-ue record run.parquet": Ran(
        K + "test_recording", as_run="the same with --duration 5s", why="it records until"
        " interrupted"),
    "rezolus-ue dump --from run.rzr run.parquet": Ran(K + "test_recording"),
    "sudo rezolus-ue record --ring /var/lib/rezolus-ue/ring --max-size 1G --max-age 1h": Ran(
        K + "test_flight_recorder", as_run="the same in the background, stopped at the end",
        why="it records until interrupted"),
    "sudo rezolus-ue dump incident.rzr": Ran(K + "test_flight_recorder"),
    "sudo rezolus-ue dump --last 5m last5.rzr": Ran(K + "test_flight_recorder"),
    "sudo rezolus-ue dump incident.parquet": Ran(K + "test_flight_recorder"),
    "sudo kill -USR1 $(cat /var/lib/rezolus-ue/ring/recorder.pid)": Ran(
        K + "test_flight_recorder"),
    "python: from rezolus_ue.consume.recording import read_meta, read_records": Ran(
        K + "test_recording"),
    "python: from rezolus_ue.consume.recording import to_pandas": Ran(K + "test_recording"),
    "python: import duckdb": Ran(K + "test_recording"),
    # docs/view.md
    "sudo rezolus-ue view": Ran(
        V + "test_live_follows_only_while_a_page_is_open", as_run="rezolus-ue view --port 0",
        why=ANY_PORT),
    "rezolus-ue view --from run.rzr": Ran(V + "test_pages_show_the_recording",
                                          as_run="the same with --port 0", why=ANY_PORT),
    "rezolus-ue view --from before.rzr --compare after.rzr": Ran(
        V + "test_compare_two_ranges_side_by_side", as_run="one recording compared with"
        " itself, with --range ..1s --compare-range=-1s.. --port 0", why=ANY_PORT),
    "rezolus-ue view --from run.rzr --range 0s..5m --compare-range=-5m..": Ran(
        V + "test_compare_two_ranges_side_by_side", as_run="--range ..1s"
        " --compare-range=-1s.. --port 0", why="the test's recording lasts seconds"),
    "ssh -L 9746:127.0.0.1:9746 HOST sudo rezolus-ue view": NotRun(
        "needs a second host; tests/test_view.py reaches view on 127.0.0.1 as the tunnel does"),
    # docs/api.md
    "python: import sys": Ran("tests/test_api.py::"
                              "test_docs_example_agent_alerts_on_a_recording",
                              as_run="the agent on a recording instead of live",
                              why="live needs the agent with BPF on user_events, which 6.12"
                              " (the VM) does not run"),
    "python: import json": Ran("tests/test_recorder.py::"
                               "test_docs_standalone_reader_reads_what_we_write"),
    'sql: SELECT max("cpu_usage/id=0/state=user") - min("cpu_usage/id=0/state=user") AS user_ns': Ran(  # noqa: E501
        K + "test_recording"),
    # docs/prometheus.md
    "sudo rezolus-ue exporter &": Ran(K + "test_exporter"),
    "curl -s http://127.0.0.1:9745/metrics | grep -A3 'TYPE rezolus_cpu_usage_user'": Ran(
        K + "test_exporter"),
    # Run as written, as its own process (test_exporter stops it when it has served).
    "sudo rezolus-ue exporter --listen 0.0.0.0:9745": Ran(K + "test_exporter"),
    "yaml: # /etc/prometheus/prometheus.yml": NotRun(NO_FLEET),
    "yaml: scrape_configs:": NotRun(NO_FLEET),
    "yaml: # /etc/prometheus/targets/rezolus-web.yml": NotRun(NO_FLEET),
    "promql: 1 - avg by (instance) (": NotRun(NO_QUERY),
    "promql: max by (instance) (max_over_time(rezolus_cpu_usage_busy_ratio_dist{quantile=\"1\"}"
    "[1m]))": NotRun(NO_QUERY),
    "promql: quantile(0.99, max by (instance) (rezolus_cpu_usage_busy_ratio_dist"
    "{quantile=\"0.99\"}))": NotRun(NO_QUERY),
    "promql: sum by (instance) (rate(rezolus_network_interface_rx_bytes_total"
    "{interface!=\"lo\"}[1m]))": NotRun(NO_QUERY),
    "promql: max by (instance, interface) (rezolus_network_interface_rx_bytes_per_second"
    "{quantile=\"1\"})": NotRun(NO_QUERY),
    "promql: rate(rezolus_blockio_device_busy_seconds_total[1m])": NotRun(NO_QUERY),
    "promql: rezolus_scheduler_runqueue_latency_seconds{quantile=\"0.99\"}": NotRun(NO_QUERY),
    "promql: topk by (instance) (5, rate(rezolus_process_cpu_user_seconds_total[1m])":
        NotRun(NO_QUERY),
    "promql: rezolus_processes_load_1m": NotRun(NO_QUERY),
    "promql: rezolus_agent_status_errors{state=~\"failed|unavailable\"}": NotRun(NO_QUERY),
    "promql: rate(rezolus_agent_cpu_user_seconds_total[5m]) + rate(rezolus_agent_cpu_system"
    "_seconds_total[5m])": NotRun(NO_QUERY),
    # docs/security.md
    "sudo rezolus-ue run": Ran(K + "test_agent_variants"),
    "ini: [Service]": NotRun(NO_SYSTEMD),
    # docs/kernels.md
    "grep -E 'CONFIG_(USER_EVENTS|UPROBE_EVENTS|DEBUG_INFO_BTF|KPROBES)=' /boot/config-$(uname"
    " -r)": NotRun("reads the config file a distribution kernel installs in /boot; the test"
                   " machines' kernels have none (rezolus-ue check, which the tests run,"
                   " probes the same features)"),
    "sudo sh docs/repro/probe-array-zeros.sh": Ran(
        "tests/uprobe/test_uprobe_transport.py::test_the_array_reproducer_in_the_docs"),
    "sudo rezolus-ue events --bpftrace rezolus_cpu_usage > cpu_usage.bt": Ran(
        "tests/kernel/test_ebpf_uprobe.py::test_the_docs_recipe"),
    "sudo rezolus-ue tail rezolus_cpu_usage > /dev/null &": Ran(
        "tests/kernel/test_ebpf_uprobe.py::test_the_docs_recipe",
        as_run="the same without `&`, started by the test as a process of its own",
        why="the test's shell has no job control; it stops the process as `kill %1` does"),
    "sudo bpftrace cpu_usage.bt": Ran(
        "tests/kernel/test_ebpf_uprobe.py::test_the_docs_recipe",
        as_run="the same on a pseudo-terminal, sent SIGINT once it printed three records"
        " of every CPU", why="it runs until Ctrl-C"),
    "kill %1": Ran(
        "tests/kernel/test_ebpf_uprobe.py::test_the_docs_recipe",
        as_run="SIGTERM to the process the test started for the `&` line",
        why="the test's shell has no job control"),
    # man/rezolus-ue.8
    "cat /sys/kernel/tracing/events/*/rezolus_cpu_usage/format": Ran(
        K + "test_man_page_consuming"),
    "perf record -e 'user_events:rezolus_*' -a -- sleep 3 && perf script": Ran(
        KU + "test_man_page_consuming"),
    "perf record -e 'rezolus_ue:rezolus_*' -a -- sleep 3 && perf script": Ran(
        K + "test_man_page_consuming"),
    "cd /sys/kernel/tracing": Ran(K + "test_man_page_consuming"),
    "echo rezolus_cpu_usage >> set_event": Ran(K + "test_man_page_consuming"),
    "cat trace_pipe": Ran(K + "test_man_page_consuming",
                          as_run="the same under timeout 60, through head -n 2",
                          why="trace_pipe is read until interrupted"),
    "echo '!rezolus_cpu_usage' >> set_event": Ran(K + "test_man_page_consuming"),
    "mkdir instances/rezolus": Ran(K + "test_man_page_consuming"),
    "echo rezolus_cpu_usage > instances/rezolus/set_event": Ran(K + "test_man_page_consuming"),
    "cat instances/rezolus/trace_pipe": Ran(
        K + "test_man_page_consuming", as_run="the same under timeout 60, through head -n 2",
        why="trace_pipe is read until interrupted"),
    "rmdir instances/rezolus": Ran(K + "test_man_page_consuming"),
    "trace-cmd record -e rezolus_cpu_usage sleep 5": Ran(KU + "test_trace_cmd"),
    "trace-cmd report": Ran(KU + "test_trace_cmd"),
    "python: import random": Ran(AU + "test_an_unprivileged_app_publishes_otlp_metrics"
                                      "_that_perf_sees"),
    "perf record -e user_events:otlp_metrics -a -- sleep 10 && perf script": Ran(
        AK + "test_the_example_service_publishes_otlp_metrics_without_an_agent",
        as_run="perf record -q -e user_events:otlp_metrics -a -o FILE, stopped after three"
        " records, then perf script -i FILE", why=PERF_WHY),
    "perf record -e rezolus_ue:otlp_metrics -a -- sleep 10 && perf script": Ran(
        AU + "test_an_unprivileged_app_publishes_otlp_metrics_that_perf_sees",
        as_run="perf record -q -e rezolus_ue:otlp_metrics -a -o FILE, stopped after three"
        " records, then perf script -i FILE", why=PERF_WHY),
    "groupadd --system tracing": Ran(
        AK + "test_an_unprivileged_service_needs_only_write_access_to_user_events_data",
        as_run="nobody's own group", why=GROUP_WHY),
    "chgrp tracing /sys/kernel/tracing /sys/kernel/tracing/user_events_data": Ran(
        AK + "test_an_unprivileged_service_needs_only_write_access_to_user_events_data",
        as_run="chown to nobody's group", why=GROUP_WHY),
    "usermod -a -G tracing checkout": Ran(
        AK + "test_an_unprivileged_service_needs_only_write_access_to_user_events_data",
        as_run="the service runs as nobody, in its own group", why=GROUP_WHY),
    "chgrp tracing /sys/kernel/tracing/user_events_data": Ran(KU + "test_tracing_group"),
    "chmod g+rw /sys/kernel/tracing/user_events_data": Ran(KU + "test_tracing_group"),
    "chgrp tracing /sys/kernel/tracing": Ran(KU + "test_tracing_group"),
    "chmod g+rx /sys/kernel/tracing": Ran(KU + "test_tracing_group"),
    "mount -o remount,gid=tracing /sys/kernel/tracing": Ran(KU + "test_tracing_group"),
    ".venv/bin/python -m rezolus_ue.bpf.build": Ran(U + "test_bpf_build_command"),
    "sudo rezolus-ue events --delete": Ran(KU + "test_agent_persists"),
    "sudo rezolus-ue run --config /etc/rezolus-ue/config.toml -i 100ms": Ran(
        KU + "test_agent_persists", as_run="the same in the background", why=UNTIL_STOPPED),
    "toml: [agent]": Ran(U + "test_config_examples_validate"),
    "toml: [[trigger]]": Ran(U + "test_config_examples_validate"),
    "message: rezolus-ue: error: /etc/rezolus-ue/config.toml:2: [agent]": Ran(
        U + "test_config_error_message", as_run="sudo rezolus-ue run -c FILE",
        why="FILE is a temporary file with the same line 2"),
    "sudo rezolus-ue run -s 20ms": Ran(K + "test_agent_variants",
                                       as_run="the same in the background", why=UNTIL_STOPPED),
    "sudo perf record -e user_events:rezolus_cpu_usage_dist -a -- sleep 10": Ran(
        KU + "test_agent_variants"),
    "sudo perf record -e rezolus_ue:rezolus_cpu_usage_dist -a -- sleep 10": Ran(
        K + "test_agent_variants"),
    "sudo perf script": Ran(K + "test_agent_variants"),
    "sudo perf record -e 'user_events:rezolus_*' -a -- sleep 3": Ran(KU + "test_agent_variants"),
    "sudo perf record -e 'rezolus_ue:rezolus_*' -a -- sleep 3": Ran(K + "test_agent_variants"),
    "sudo rezolus-ue top --once > top.txt": Ran(K + "test_top_in_tmux"),
}
