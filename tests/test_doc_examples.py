"""Every example of the docs is exercised by a test, or listed as not run with the reason.

The table is ``doc_examples.EXERCISED``; the commands that need a running agent run in
tests/kernel/test_doc_examples.py (this host's transport) and, where they are about
user_events itself, tests/kernel/test_doc_examples_user_events.py. The examples that need
no agent (configuration files, install-service, the BPF build) run here.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import doc_examples as d
import pytest

ROOT = d.ROOT
CLI = [sys.executable, "-m", "rezolus_ue"]


def _by_key() -> dict[str, list[d.Example]]:
    out: dict[str, list[d.Example]] = {}
    for e in d.examples():
        out.setdefault(e.key, []).append(e)
    return out


def test_every_example_is_exercised_or_listed_as_not_run() -> None:
    missing = [f"{e.source}:{e.line}: {e.key!r}" for e in d.examples()
               if e.key not in d.EXERCISED]
    assert not missing, (
        "examples in the docs with no entry in tests/doc_examples.py EXERCISED (add a test"
        " that runs them, or a NotRun with the reason):\n" + "\n".join(missing))


def test_every_entry_is_still_in_the_docs() -> None:
    stale = sorted(set(d.EXERCISED) - set(_by_key()))
    assert not stale, f"EXERCISED entries no doc shows any more: {stale}"


def test_entries_name_existing_tests_and_say_why() -> None:
    for key, how in d.EXERCISED.items():
        assert how.why or isinstance(how, d.Ran), key
        if isinstance(how, d.NotRun):
            continue
        assert bool(how.as_run) == bool(how.why), (key, "a substitution says why")
        path, _, func = how.test.partition("::")
        src = ROOT / path
        assert src.is_file() and re.search(rf"^def {func}\(", src.read_text(), re.M), (
            f"{key!r}: no test {how.test}")


def test_a_command_naming_one_transport_shows_the_other_too() -> None:
    """A reader on either kind of kernel finds the command to type: one that names a
    transport's group is shown beside its twin for the other transport (in the same
    file), unless ONE_FORM says why it has none."""
    keys = {(e.source, e.key) for e in d.examples()}
    lone = []
    for source, key in sorted(keys):
        was = d.transport_of(key)
        if was is None or key in d.ONE_FORM:
            continue
        other = next(t for t in d.GROUPS if t != was)
        if (source, d.in_transport(key, other)) not in keys:
            lone.append(f"{source}: {key!r} without {d.in_transport(key, other)!r}")
    assert not lone, ("show each in both forms (or say why not in doc_examples.ONE_FORM):\n"
                      + "\n".join(lone))
    assert set(d.ONE_FORM) <= {k for _s, k in keys}, "ONE_FORM names a command no doc shows"


def test_each_form_runs_where_its_transport_is() -> None:
    """The uprobe form of a command runs on this host (test_doc_examples.py), the
    user_events form in the kernel tier (test_doc_examples_user_events.py)."""
    for key, how in d.EXERCISED.items():
        t = d.transport_of(key)
        if t is not None and isinstance(how, d.Ran):
            assert how.test.startswith(d.RUN_IN[t]), f"{key!r}: run by {how.test}"


@pytest.mark.parametrize(("text", "transport", "twin"), [
    ("perf record -e 'user_events:rezolus_*' -a", "user_events",
     "perf record -e 'rezolus_ue:rezolus_*' -a"),
    ("echo 1 > events/rezolus_ue/rezolus_cpu_usage/enable", "uprobe",
     "echo 1 > events/user_events/rezolus_cpu_usage/enable"),
    ("echo rezolus_cpu_usage > set_event", None, "echo rezolus_cpu_usage > set_event"),
    ("cat events/*/rezolus_cpu_usage/format", None, "cat events/*/rezolus_cpu_usage/format"),
    ("python -m rezolus_ue.linux.uprobe_stub", None, "python -m rezolus_ue.linux.uprobe_stub"),
])
def test_transport_forms(text: str, transport: str | None, twin: str) -> None:
    assert d.transport_of(text) == transport
    other = next((t for t in d.GROUPS if t != transport), "uprobe")
    assert d.in_transport(text, other) == twin
    assert d.in_transport(twin, transport or other) == text


@pytest.mark.parametrize(("claim", "line", "ok"), [
    ("12:00:01.000412 [001] rezolus_cpu_usage: cpu=0 user_ns=2310000000 nice_ns=0 ...",
     "15:59:53.613235 [001] rezolus_cpu_usage: cpu=0 user_ns=18370000000 nice_ns=0 x=1", True),
    ("python3  412 [000]  24.51: user_events:rezolus_agent: pid=412 ...",
     "      rezolus-ue   117 [000]   177.045: user_events:rezolus_agent: pid=117", False),
    ("cpu=0x1 (1) user_ns=0x... (1980000000) nice_ns=0x0 (0) ...",
     "cpu=0x0 (0) user_ns=0x4e2816500 (20980000000) nice_ns=0x0 (0) system_ns=0x4", True),
    ("rezolus-ue: publishing ... events via /sys/kernel/tracing: rezolus_cpu_usage, ...",
     "rezolus-ue: publishing 51 events via /sys/kernel/tracing: rezolus_cpu_usage, b", True),
    ("# TYPE rezolus_cpu_usage_user_seconds_total counter",
     "# TYPE rezolus_cpu_usage_user_seconds_total gauge", False),
    ("rezolus-ue 412 [000] 24.51: rezolus_ue:rezolus_agent: (7f5dff9cf340) pid=412 ...",
     "rezolus-ue 24931 [001] 11003.03: rezolus_ue:rezolus_agent: (7f0aa0c1f340) pid=24931 x",
     True),
    ("rezolus_ue:rezolus_agent: (7f5dff9cf340) pid=412",
     "rezolus_ue:rezolus_agent: pid=412", False),
    ("a deadbeef b", "a 12345678 b", False),
])
def test_claim_pattern(claim: str, line: str, ok: bool) -> None:
    assert bool(d.claim_pattern(claim).fullmatch(line)) is ok


def test_extraction_of_each_kind_of_block() -> None:
    md = ("```console\n$ sudo a 'x # y'   # comment\nout 1\n\n$ b\n```\n"
          "```sh\nc \\\n  --d   # e\n# only a comment\n```\n```python\n\nimport f\n```\n"
          "```\nnot an example\n```\n")
    got = [(e.kind, e.key, e.claims, e.line) for e in d.markdown_examples("x.md", md)]
    assert got == [("command", "sudo a 'x # y'", ("out 1",), 2), ("command", "b", (), 5),
                   ("command", "c --d", (), 8), ("python", "python: import f", (), 13)]
    man = (".EX\nperf record \\-e \\(aquser_events:*\\(aq \\e\n    && perf script\n.EE\n"
           ".EX\n[agent]\nx = 1\n.EE\n")
    got = [(e.kind, e.key) for e in d.man_examples("x.8", man)]
    assert got == [("command", "perf record -e 'user_events:*' && perf script"),
                   ("toml", "toml: [agent]")]


def test_config_examples_validate() -> None:
    """The configuration files the man pages show are valid as written."""
    blocks = [e for e in d.examples() if e.kind == "toml"]
    assert blocks
    for e in blocks:
        p = subprocess.run([*CLI, "config", "check", "-"], input=e.text, cwd=ROOT,
                           capture_output=True, text=True, timeout=120)
        assert p.returncode == 0, f"{e.source}:{e.line}: {p.stderr}"


def test_config_error_message(tmp_path: Path) -> None:
    """rezolus-ue(8) shows the error for a bad line 2 exactly as `run` prints it."""
    (e,) = [e for e in d.examples() if e.kind == "message"]
    shown = " ".join(e.text.split())
    path = shown.split(": ")[2].rsplit(":", 1)[0]  # the file the message names
    bad = tmp_path / "config.toml"
    bad.write_text('[agent]\npublish_interval = "5ms"\n')
    p = subprocess.run([*CLI, "run", "-c", str(bad)], cwd=ROOT, capture_output=True,
                       text=True, timeout=120)
    assert p.returncode == 2
    assert p.stderr.strip().replace(str(bad), path) == shown


@pytest.mark.skipif(os.geteuid() != 0, reason="install-service writes root-owned files")
def test_install_service_as_the_readme_says(tmp_path: Path) -> None:
    """README: units, config and man pages installed; the systemctl commands printed."""
    exe = Path(sys.executable).with_name("rezolus-ue")
    p = subprocess.run([str(exe), "install-service", "--root", str(tmp_path)], cwd=ROOT,
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    for rel in ("etc/systemd/system/rezolus-ue.service",
                "etc/systemd/system/rezolus-ue-exporter.service",
                "etc/rezolus-ue/config.toml", "usr/local/share/man/man8/rezolus-ue.8",
                "usr/local/share/man/man5/rezolus-ue.toml.5"):
        assert (tmp_path / rel).is_file(), rel
    assert (tmp_path / "etc/rezolus-ue/config.toml").stat().st_mode & 0o777 == 0o644
    out = p.stdout + p.stderr
    assert "systemctl daemon-reload" in out
    assert "systemctl enable --now rezolus-ue.service rezolus-ue-exporter.service" in out


@pytest.mark.skipif(not (shutil.which("clang") and Path("/sys/kernel/btf/vmlinux").exists()),
                    reason="building the BPF objects needs clang and kernel BTF")
def test_bpf_build_command() -> None:
    p = subprocess.run([sys.executable, "-m", "rezolus_ue.bpf.build"], cwd=ROOT,
                       capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr
    assert list((ROOT / "bpf" / ".output").glob("*.bpf.o"))


def test_promql_names_exist() -> None:
    """The PromQL examples query only metrics the exporter serves."""
    table = (ROOT / "docs/prometheus.md").read_text()
    served = set(re.findall(r"^\| `(rezolus_\w+)` \|", table, re.M))
    assert served
    for e in d.examples():
        if e.kind != "promql":
            continue
        for name in re.findall(r"\brezolus_\w+", e.text):
            base = name.removesuffix("_histogram_bucket")
            assert base in served, f"{e.source}:{e.line}: {name} is not exported"


def test_man_page_says_what_top_subscribes_to_and_attaches() -> None:
    """rezolus-ue(8) lists top's events and the BPF samplers they make the agent attach."""
    from rezolus_ue.consume.top.registry import TOP_EVENTS
    from rezolus_ue.samplers import REGISTRY
    from rezolus_ue.samplers.bpf_sampler import BpfSampler

    page = (ROOT / "man/rezolus-ue.8").read_text()
    para = page.split("subscribes only to the events its panels show", 1)[1].split(".ad\n")[0]
    events, samplers = para.split("BPF programs of")
    assert sorted(re.findall(r"\b(rezolus_\w+)", events)) == sorted(TOP_EVENTS)
    bpf = [n for n, c in REGISTRY.items() if issubclass(c, BpfSampler)
           and {e.name for e in c.events()} & set(TOP_EVENTS)]
    assert sorted(re.findall(r"^\.BR? (\w+)", samplers, re.M)) == sorted(bpf)
