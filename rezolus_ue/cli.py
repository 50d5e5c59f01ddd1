"""Command line: ``rezolus-ue run | events | check``.

Errors end as one line on stderr and a non-zero exit; never a traceback (a bug still
prints one, with ``--debug``).
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
from pathlib import Path

from . import __version__
from . import config as cfg
from .cli_base import PROG, Parser
from .errors import ConfigError, KernelFeatureMissing, RezolusError, os_error_text

log = logging.getLogger("rezolus_ue")

_DESCRIPTION = """\
rezolus-ue samples systems telemetry (procfs, perf events, BPF) and publishes every metric
family as a Linux tracepoint: user_events:rezolus_* where the kernel has user_events, else
the uprobe events rezolus_ue:rezolus_* (`check` and `events` say which; tail, top, record
and exporter read either). Publishing costs nothing until a consumer enables a
tracepoint: with nobody listening, samplers do not run."""

_EPILOG = """\
examples:
  sudo rezolus-ue check                    can this kernel run the agent?
  sudo rezolus-ue run                      publish with the default config
  sudo rezolus-ue events                   our tracepoints, who consumes them, how to watch
  sudo perf record -e 'user_events:rezolus_*' -a -- sleep 3 && sudo perf script
  sudo perf record -e 'rezolus_ue:rezolus_*' -a -- sleep 3 && sudo perf script
                                           the same on kernels without user_events

See rezolus-ue(8) and docs/events.md for every event and field."""


def _duration(text: str) -> int:
    """Return an interval given on the command line, checked as publish_interval is."""
    opt = next(o for o in cfg.AGENT_OPTIONS if o.key == "publish_interval")
    try:
        return int(opt.convert(text))  # type: ignore[call-overload]
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


#: Commands defined here; the others come from modules imported only when needed.
_BUILTIN = ("run", "events", "check", "cleanup")


def _command_of(argv: list[str]) -> str | None:
    """Return the command word of ``argv`` (the first argument not an option), if any."""
    return next((a for a in argv if not a.startswith("-")), None)


def build_parser(lean: bool = False) -> argparse.ArgumentParser:
    """Return the argument parser (also used to check the man page covers every option).

    ``lean``: only the commands defined here. The others' modules (the exporter's HTTP
    server, top's rich UI, ...) take ~0.3 s to import on the reference VM, several seconds
    under an emulated CPU: ``run`` and ``check`` do not pay for them."""
    fmt = argparse.RawDescriptionHelpFormatter
    p = Parser(prog=PROG, description=_DESCRIPTION, epilog=_EPILOG, formatter_class=fmt)
    p.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    p.add_argument("--debug", action="store_true", help="show tracebacks for internal errors")
    sub = p.add_subparsers(dest="command", metavar="COMMAND", parser_class=Parser)

    run = sub.add_parser(
        "run", formatter_class=fmt, help="run the agent (publish until SIGINT/SIGTERM)",
        description="Define every enabled sampler's events as tracepoints (user_events, or"
        " uprobe events where the kernel lacks user_events: [agent] transport) and publish"
        " records while consumers listen. Stops cleanly on SIGINT or SIGTERM, removing"
        " its events.",
        epilog="examples:\n  sudo rezolus-ue run\n  sudo rezolus-ue run --interval 100ms\n"
        "  sudo rezolus-ue run --config /etc/rezolus-ue/config.toml",
    )
    run.add_argument("-c", "--config", metavar="FILE", type=cfg.path_arg,
                     help=f"TOML config file (default: {cfg.SYSTEM_CONFIG} if it exists,"
                     " else built-in defaults; see configs/default.toml)")
    run.add_argument("-i", "--interval", metavar="DURATION", type=_duration,
                     help="publish interval, overriding [agent] publish_interval:"
                     f" {cfg.DURATION_HELP}")
    run.add_argument("-s", "--sample-interval", metavar="DURATION", type=_duration,
                     help="sample interval for oversampled (*_dist) events, overriding"
                     " [agent] sample_interval")
    run.add_argument("-u", "--user", metavar="USER",
                     help="after start-up (events registered, files opened as root), become"
                     " USER, keeping only the capabilities the enabled samplers need"
                     " (docs/security.md)")

    ev = sub.add_parser(
        "events", formatter_class=fmt,
        help="list our tracepoints, their consumers and how to watch them",
        description="List every rezolus-ue event: whether the running agent registered it"
        " (or a stopped one left it), whether it is enabled, which consumers use it (as the"
        " kernel says: user_events_status and ftrace's enable files, or on the uprobe"
        " transport the stub's reference counters), and the perf, ftrace and trace-cmd"
        " commands to watch it, for the transport in use. Exits 1 when it could not read"
        " everything (not root: run it with sudo).",
    )
    ev.add_argument("--commands", action="store_true",
                    help="print only the perf, ftrace and trace-cmd commands, one per line")
    ev.add_argument("--bpftrace", nargs="+", metavar="EVENT",
                    help="print a bpftrace program that prints each record of the EVENTs,"
                    " read where the agent hands it to the kernel (uprobe transport only;"
                    " docs/kernels.md#ebpf-consumers)")
    ev.add_argument("--delete", nargs="*", metavar="NAME",
                    help="delete the named events, or with no name every rezolus_* event"
                    " nobody uses any more (what `persist = true` leaves after the agent"
                    " exits); root or CAP_PERFMON")

    cln = sub.add_parser(
        "cleanup", formatter_class=fmt,
        help="remove the uprobe events a killed agent left",
        description="Delete the rezolus_ue:* uprobe events defined on this installation's"
        " stub, which an agent stopped by SIGKILL leaves behind (a clean stop removes them,"
        " and the next `run` does too). Events of other tools, in any group, are never"
        " touched; one a consumer still has enabled stays until that consumer stops."
        " Refuses while an agent is running. Root.",
        epilog="examples:\n  sudo rezolus-ue cleanup")
    cln.add_argument("--dry-run", action="store_true", help="list what would be deleted")

    chk = sub.add_parser(
        "check", formatter_class=fmt, help="check the kernel features rezolus-ue needs",
        description="Probe tracefs, user_events, BPF, BTF, perf events and kprobes, with a"
        " hint for each failure, then check every sampler as `run` runs it (as root:"
        " started with every capability, then loaded and attached with only those the"
        " agent keeps) and say which can run here and why not. Exits 1 when"
        " `rezolus-ue run` cannot work here.",
        epilog="examples:\n  sudo rezolus-ue check\n"
        "  sudo rezolus-ue check --user rezolus-ue    as the systemd unit runs the agent",
    )
    chk.add_argument("-c", "--config", metavar="FILE", type=cfg.path_arg,
                     help="check the samplers as configured in FILE (default: as `run`)")
    chk.add_argument("-u", "--user", metavar="USER",
                     help="check the samplers as `run --user USER` runs them: after"
                     " start-up as USER with only the capabilities they need")
    if lean:
        return p
    from . import config_cmd, service_cmd
    from .consume import exporter, tail, top, view
    from .consume.recording import dump, recorder

    for module in (top, tail, recorder, dump, exporter, view, config_cmd, service_cmd):
        module.add_parser(sub)
    return p


def main(argv: list[str] | None = None) -> int:
    """Run the command line; return the exit status."""
    words = sys.argv[1:] if argv is None else argv
    parser = build_parser(lean=_command_of(words) in _BUILTIN)
    args = parser.parse_args(words)
    if args.command is None:
        parser.print_help()
        return 2
    logging.basicConfig(format=f"{PROG}: %(message)s", level=logging.INFO, stream=sys.stderr)
    try:
        func = getattr(args, "func", None) or _COMMANDS[args.command]
        return func(args)
    except RezolusError as e:
        print(f"{PROG}: error: {e}", file=sys.stderr)
        return e.exit_code
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # `rezolus-ue events | head`: not an error.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except Exception as e:
        if (text := _user_error_text(e)) is not None and not args.debug:
            print(f"{PROG}: error: {text}", file=sys.stderr)
            return 1
        if args.debug:
            raise
        print(f"{PROG}: internal error: {type(e).__name__}: {e} (rerun with --debug for"
              " a traceback, and please report it)", file=sys.stderr)
        return 70


def _user_error_text(e: Exception) -> str | None:
    """Return the one-line message of an error that no boundary translated but that the
    user can act on: a path's OS error (name, permission, full or read-only disk) or
    tracefs's (its messages say what to do)."""
    if isinstance(e, OSError) and e.filename is not None:
        return os_error_text(e, e.filename, "use")
    if isinstance(e, ValueError) and str(e) == "embedded null byte":  # os.* on a path
        return "a path cannot contain a NUL character"
    tracefs = sys.modules.get("tracefs_tools.errors")
    if tracefs is not None and isinstance(e, tracefs.TracefsError):
        return str(e)
    return None


def _tracefs_root(configured: str) -> Path:
    from tracefs_tools import TracefsError, find_tracefs

    if configured:
        return Path(configured)
    try:
        return find_tracefs(mount=os.geteuid() == 0)
    except TracefsError as e:
        raise KernelFeatureMissing("tracefs", str(e)) from None


def load_config(path: Path | None) -> cfg.Config:
    """Return the config from ``path``, else the system file if present, else defaults."""
    from .samplers import options

    return cfg.load_or_default(path, options())


def _give_runtime_dir(user: str | None) -> None:
    """Hand the runtime directory (lock, status) to ``user``, or back to this process's
    own uid, before dropping privileges: the agent must still write its status after
    the drop, and a directory a ``run --user`` run left to another user would otherwise
    keep a later root agent (without CAP_DAC_OVERRIDE after its drop) from writing it."""
    import pwd

    from .agent import RUNTIME_DIR

    if user is None:
        uid, gid = os.geteuid(), os.getegid()
    else:
        try:
            pw = pwd.getpwnam(user)
        except KeyError:
            return  # drop_after_start says so
        uid, gid = pw.pw_uid, pw.pw_gid
    for p in (RUNTIME_DIR, *RUNTIME_DIR.iterdir()):
        try:
            st = p.lstat()
            if (st.st_uid, st.st_gid) != (uid, gid):
                os.chown(p, uid, gid, follow_symlinks=False)
        except OSError as e:
            raise RezolusError(f"cannot hand {p} to uid {uid}: {e.strerror} (switching"
                               " users needs CAP_CHOWN, CAP_SETUID and CAP_SETGID at"
                               " start-up; see docs/security.md)") from None


def _cmd_run(args: argparse.Namespace) -> int:
    from dataclasses import replace

    from .agent import RUNTIME_DIR, Agent, single_instance_lock

    overrides = {k: v for k, v in (("publish_interval", args.interval),
                                    ("sample_interval", args.sample_interval)) if v is not None}

    def configure() -> cfg.Config:
        """Load the config with the command line's overrides (again on SIGHUP)."""
        conf = load_config(args.config)
        if overrides:
            agent = {**conf.agent, **overrides}
            if "sample_interval" not in overrides:
                # A faster publish interval drags the sample interval along.
                agent["sample_interval"] = min(agent["sample_interval"],
                                               agent["publish_interval"])
            if agent["sample_interval"] > agent["publish_interval"]:
                raise ConfigError("--sample-interval must not exceed the publish interval")
            conf = replace(conf, agent=agent)
        return conf

    conf = configure()
    log.setLevel(str(conf.agent["log_level"]).upper())
    lock = single_instance_lock()
    agent = Agent(conf, _tracefs_root(str(conf.agent["tracefs"])),
                  RUNTIME_DIR if lock is not None else None)
    stop: list[int] = []
    rfd, wfd = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)

    def on_signal(signum: int, _frame: object) -> None:
        if signum == signal.SIGHUP:
            agent.request_reload()
        else:
            stop.append(signum)

    agent.reload_source = configure
    old_wakeup = signal.set_wakeup_fd(wfd)
    previous = {s: signal.signal(s, on_signal)
                for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    try:
        agent.start()
        names = agent.event_names
        if not names:
            raise ConfigError("no sampler could start: nothing to publish (see warnings above)")
        if conf.agent["drop_capabilities"] or args.user:
            from .privilege import drop_after_start, kept

            if lock is not None:
                _give_runtime_dir(args.user)
            drop_after_start(kept(conf), user=args.user)
        log.info("publishing %d events via %s: %s", len(names), agent.tracefs, ", ".join(names))
        group = agent.publisher.group if agent.publisher else "user_events"
        log.info("watch with: perf record -e '%s:rezolus_*' -a -- sleep 10; perf script",
                 group)
        agent.run(rfd, lambda: bool(stop))
    finally:
        agent.close()
        signal.set_wakeup_fd(old_wakeup)
        for s, h in previous.items():
            signal.signal(s, h)
        os.close(rfd)
        os.close(wfd)
        if lock is not None:
            os.close(lock)
    st = agent.stats()
    log.info("stopped: %d records written, %d EBADF races, %d write errors, %d sampler errors",
             st["events_written"], st["ebadf_races"], st["write_errors"], st["sampler_errors"])
    return 0


def _cmd_events(args: argparse.Namespace) -> int:
    from .events_cmd import delete_events, show_events

    if args.delete is not None:
        return delete_events(args.delete)
    if args.bpftrace:
        from .ebpf_recipe import print_bpftrace

        return print_bpftrace(args.bpftrace)
    return show_events(commands_only=args.commands)


def _cmd_check(args: argparse.Namespace) -> int:
    from rich.console import Console

    from .check import run_checks

    results = run_checks(mount=os.geteuid() == 0, config=load_config(args.config),
                         user=args.user)
    con = Console(highlight=False)
    style = {"pass": "green", "warn": "yellow", "fail": "red"}
    for r in results:
        tag = f"[{style[r.status]}]{r.status.upper():4}[/]"
        con.print(f"{tag}  [bold]{r.name}[/]: {r.detail}", soft_wrap=True)
    blocked = [r.name for r in results if r.required and r.status == "fail"]
    if blocked:
        con.print(f"\n`{PROG} run` cannot work here: {', '.join(blocked)} failed.")
        return 1
    con.print(f"\n`{PROG} run` can publish here.")
    return 0


def _cmd_cleanup(args: argparse.Namespace) -> int:
    from .events_cmd import cleanup

    return cleanup(dry_run=args.dry_run)


_COMMANDS = {"run": _cmd_run, "events": _cmd_events, "check": _cmd_check,
             "cleanup": _cmd_cleanup}
