"""``rezolus-ue install-service``: install the systemd units, config file and man pages.

Copies ``packaging/systemd/*.service`` into ``/etc/systemd/system`` with ``ExecStart=``
pointing at this installation's program, creates ``/etc/rezolus-ue/config.toml`` (every
option at its default, mode 0644) unless it exists, installs the man pages under
``/usr/local/share/man`` and creates the ``rezolus-ue`` user the agent runs as (and the
``tracing`` group) through systemd-sysusers, unless ``--no-create-user``. It prints the
``systemctl`` commands to run and runs them only with ``--now``. ``--root`` installs into
another tree (tests, images).
"""

from __future__ import annotations

import argparse
import os
import pwd
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

from . import config as cfg
from .errors import ConfigError, RezolusError

TREE = Path(__file__).resolve().parent.parent
UNITS_DIR = TREE / "packaging" / "systemd"
SYSUSERS = TREE / "packaging" / "sysusers.d" / "rezolus-ue.conf"
MAN_PAGES = {TREE / "man" / "rezolus-ue.8": "man8", TREE / "man" / "rezolus-ue.toml.5": "man5"}
AGENT_UNIT, EXPORTER_UNIT = "rezolus-ue.service", "rezolus-ue-exporter.service"
#: The user the agent's unit runs as (``run --user``), from packaging/sysusers.d.
USER = "rezolus-ue"
USERADD = ("`groupadd --system tracing && useradd --system --no-create-home --shell"
           f" /usr/sbin/nologin --groups tracing {USER}`")
#: The program path the unit templates name; replaced by the installed one.
TEMPLATE_PROGRAM = "/opt/rezolus-ue/.venv/bin/rezolus-ue"
#: The paths a unit setting hides from the service's processes (systemd.exec(5)); which
#: of them apply is read from the units' own text.
HIDING: dict[tuple[str, str], tuple[str, ...]] = {
    ("ProtectHome", "yes"): ("/home", "/root", "/run/user"),
    ("ProtectHome", "tmpfs"): ("/home", "/root", "/run/user"),
    ("PrivateTmp", "yes"): ("/tmp", "/var/tmp"),
    ("PrivateTmp", "disconnected"): ("/tmp", "/var/tmp"),
}
#: Settings whose values are themselves paths hidden from the service.
HIDING_LISTS = ("InaccessiblePaths", "TemporaryFileSystem")
_TRUE = frozenset({"1", "yes", "true", "on"})
EXPORTER_DEFAULTS = """\
# Options of `rezolus-ue exporter` for rezolus-ue-exporter.service (see rezolus-ue(8)).
# For a remote Prometheus, listen on every address and firewall the port:
# EXPORTER_ARGS="--listen 0.0.0.0:9745"
EXPORTER_ARGS=""
"""


def default_program() -> str:
    """Return the command that runs this installation: its script, else ``python -m``."""
    exe = Path(sys.executable)  # unresolved: a venv's python is a symlink out of the venv
    script = exe.with_name("rezolus-ue")
    if os.access(script, os.X_OK):
        return str(script.absolute())
    return f"{exe.absolute()} -m rezolus_ue"


def hidden_paths(unit_text: str) -> dict[Path, str]:
    """Return each path the unit hides from its processes -> the setting that hides it."""
    last: dict[str, str] = {}
    out: dict[Path, str] = {}
    for line in unit_text.splitlines():
        if not line.strip() or line.startswith(("#", ";", "[")):
            continue
        key, _, value = (part.strip() for part in line.partition("="))
        if key in HIDING_LISTS:
            if not value:  # an empty assignment resets the list
                out = {p: s for p, s in out.items() if not s.startswith(f"{key}=")}
            for word in value.split():
                path = word.lstrip("-+").split(":", 1)[0]
                out[Path(path)] = f"{key}={word}"
        else:
            last[key] = "yes" if value.lower() in _TRUE else value
    for (key, value), paths in HIDING.items():
        if last.get(key) == value:
            out.update((Path(p), f"{key}={value}") for p in paths)
    return out


def hidden_by(path: Path, unit_text: str) -> tuple[Path, str] | None:
    """Return the hidden path ``path`` lies under and the unit setting hiding it, or None."""
    for hidden, setting in hidden_paths(unit_text).items():
        if path == hidden or hidden in path.parents:
            return hidden, setting
    return None


def unit_templates(exporter: bool) -> dict[str, str]:
    """Return the unit templates to install: name -> text."""
    if not UNITS_DIR.is_dir():
        raise RezolusError(f"no unit templates in {UNITS_DIR}: install-service runs from a"
                           " source tree (see README, 'Install as a service')")
    names = [AGENT_UNIT, EXPORTER_UNIT] if exporter else [AGENT_UNIT]
    return {name: (UNITS_DIR / name).read_text() for name in names}


def render_unit(template: str, program: str) -> str:
    """Return a unit template with its ExecStart= naming ``program``."""
    if TEMPLATE_PROGRAM not in template:
        raise RezolusError(f"unit template does not name {TEMPLATE_PROGRAM}")
    return template.replace(TEMPLATE_PROGRAM, program)


def config_text() -> str:
    """Return the text of a new /etc/rezolus-ue/config.toml: every option at its default."""
    from .samplers import default_config

    head = (f"# {cfg.SYSTEM_CONFIG}: written by `rezolus-ue install-service` with every"
            " option at its default.\n# Edit it, check it with `rezolus-ue config check`,"
            " apply it with `systemctl reload rezolus-ue`.\n")
    lines = default_config().splitlines(keepends=True)
    return head + "".join(ln for ln in lines if not ln.startswith("# Generated by"))


def _mkdirs(path: Path) -> None:
    """Create ``path`` and its missing parents with mode 0755, whatever the umask."""
    missing = [p for p in (path, *path.parents) if not p.exists()]
    for p in reversed(missing):
        p.mkdir(mode=0o755)
        p.chmod(0o755)


def _write(path: Path, text: str, mode: int = 0o644) -> str:
    """Write ``text`` to ``path`` with ``mode`` (umask aside); return what was done."""
    old = path.read_text() if path.exists() else None
    if old == text and (path.stat().st_mode & 0o777) == mode:
        return "unchanged"
    _mkdirs(path.parent)
    tmp = path.with_name(f".{path.name}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, mode)
    try:
        os.fchmod(fd, mode)  # never what the umask left: at most 0644
        os.write(fd, text.encode())
    finally:
        os.close(fd)
    os.replace(tmp, path)
    return "installed" if old is None else "updated"


def _check_existing_config(path: Path) -> list[str]:
    """Return warnings about an existing config: writable by others, or invalid."""
    from .samplers import options

    out = []
    mode = path.stat().st_mode & 0o777
    if mode & 0o022:
        out.append(f"warning: {path} has mode {mode:04o}, writable by others: the agent"
                   f" refuses it; chmod go-w {path}")
    try:
        cfg.parse(path.read_text(), options(), path)
    except ConfigError as e:
        out.append(f"warning: {e}")
    return out


def install(root: Path, program: str, *, exporter: bool = True,
            create_user: bool = True) -> list[str]:
    """Install into the tree ``root``; return one line per thing done."""
    done: list[str] = []
    for name, template in unit_templates(exporter).items():
        dest = root / "etc/systemd/system" / name
        what = _write(dest, render_unit(template, program))
        done.append(f"{what} {dest}")
    if exporter:
        defaults = root / "etc/default/rezolus-ue-exporter"
        if not defaults.exists():
            _write(defaults, EXPORTER_DEFAULTS)
            done.append(f"created {defaults} (the exporter's options)")
    conf = root / cfg.SYSTEM_CONFIG.relative_to("/")
    if conf.exists():
        done.append(f"kept {conf}")
        done += _check_existing_config(conf)
    else:
        _write(conf, config_text())
        done.append(f"created {conf} (mode 0644, every option at its default)")
    for page, section in MAN_PAGES.items():
        if page.exists():
            dest = root / "usr/local/share/man" / section / page.name
            done.append(f"{_write(dest, page.read_text())} {dest}")
    if create_user:
        done += _create_user(root)
    elif not _user_exists(root, USER):
        where = "on this system" if root == Path("/") else f"in {root / 'etc/passwd'}"
        raise RezolusError(f"user {USER} does not exist {where}, and the"
                           " agent's unit runs as it: drop --no-create-user, or create it"
                           f" ({USERADD})")
    return done


def _user_exists(root: Path, user: str) -> bool:
    """Return whether ``user`` exists on the system at ``root``: for ``/`` through NSS (a
    directory such as LDAP may hold it), for another root in its ``etc/passwd``."""
    if root == Path("/"):
        try:
            pwd.getpwnam(user)
        except KeyError:
            return False
        return True
    try:
        text = (root / "etc/passwd").read_text()
    except OSError:
        return False
    return any(line.split(":", 1)[0] == user for line in text.splitlines())


def _create_user(root: Path) -> list[str]:
    dest = root / "etc/sysusers.d" / SYSUSERS.name
    done = [f"{_write(dest, SYSUSERS.read_text())} {dest}"]
    tool = shutil.which("systemd-sysusers")
    if tool is None:
        raise RezolusError("systemd-sysusers is not installed: create the user by hand"
                           f" ({USERADD}) and pass --no-create-user")
    cmd = [tool, *([f"--root={root}"] if root != Path("/") else []), str(dest)]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=60, check=False)
    if p.returncode != 0:
        raise RezolusError(f"{' '.join(cmd)} failed: {(p.stderr or p.stdout).strip()}")
    done.append(f"user {USER} and group tracing present (systemd-sysusers): the agent"
                f" runs as {USER} after start-up (docs/security.md)")
    return done


def _run(args: argparse.Namespace) -> int:
    root = Path(args.root).absolute()
    program = args.program or default_program()
    exe = Path(program.split()[0])
    if not exe.is_absolute():
        raise ConfigError(f"--program must be an absolute path, not {program!r}")
    for name, template in unit_templates(not args.no_exporter).items():
        for where in [exe] + ([TREE] if args.program is None else []):
            if hit := hidden_by(where, template):
                raise RezolusError(f"{where} is under {hit[0]}, which {name} hides"
                                   f" ({hit[1]}): install rezolus-ue under /opt (see README,"
                                   " 'Install as a service')")
    if root == Path("/") and not os.access(exe, os.X_OK):
        raise RezolusError(f"{exe} is not an executable program")
    if args.now and root != Path("/"):
        raise ConfigError("--now starts the services of this system: it cannot go with --root")
    try:
        done = install(root, program, exporter=not args.no_exporter,
                       create_user=args.create_user)
    except PermissionError as e:
        raise RezolusError(f"{e.filename}: permission denied (run as root)") from None
    except OSError as e:
        raise RezolusError(f"{e.filename or root}: {e.strerror}") from None
    for line in done:
        print(line)
    units = [AGENT_UNIT] + ([] if args.no_exporter else [EXPORTER_UNIT])
    commands = [["systemctl", "daemon-reload"], ["systemctl", "enable", "--now", *units]]
    if not args.now:
        print("next, as root:")
        for c in commands:
            print("  " + " ".join(c))
        print(f"  systemctl status {AGENT_UNIT}")
        return 0
    for c in commands:
        p = subprocess.run(c, capture_output=True, text=True, timeout=120, check=False)
        if p.returncode != 0:
            raise RezolusError(f"{' '.join(c)} failed: {(p.stderr or p.stdout).strip()}")
        print("ran " + " ".join(c))
    return 0


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Add the ``install-service`` subcommand to the CLI's subparsers."""
    p = sub.add_parser(
        "install-service", formatter_class=argparse.RawDescriptionHelpFormatter,
        help="install the systemd units, config file and man pages",
        description=textwrap.fill(
            f"Install {AGENT_UNIT} and {EXPORTER_UNIT} into /etc/systemd/system (hardened:"
            " see docs/security.md), with ExecStart= running this installation; create"
            f" {cfg.SYSTEM_CONFIG} with every option at its default (mode 0644) unless it"
            " exists; install the man pages under /usr/local/share/man; create the"
            f" {USER} system user and the tracing group. Then print the systemctl commands"
            " that enable and start the services. The agent's unit starts it as root, to"
            f" register its events, and it then runs as {USER} with only CAP_BPF and"
            " CAP_PERFMON.", 79),
        epilog="examples:\n"
        "  sudo /opt/rezolus-ue/.venv/bin/rezolus-ue install-service\n"
        "  sudo /opt/rezolus-ue/.venv/bin/rezolus-ue install-service --now\n"
        "  rezolus-ue install-service --root /tmp/image --program /opt/rezolus-ue/.venv/bin/"
        "rezolus-ue",
    )
    p.add_argument("--root", metavar="DIR", default="/",
                   help="install into the tree DIR instead of / (for images and tests)")
    p.add_argument("--program", metavar="PATH",
                   help="the program the units run (default: this installation's"
                   " rezolus-ue script beside its Python, else `python -m rezolus_ue`)")
    p.add_argument("--no-exporter", action="store_true",
                   help=f"install only {AGENT_UNIT}, not {EXPORTER_UNIT}")
    p.add_argument("--no-create-user", dest="create_user", action="store_false",
                   help=f"do not create the {USER} system user and the tracing group"
                   " with systemd-sysusers (they must exist: the agent's unit starts as"
                   f" root and then switches to {USER})")
    # Accepted for scripts written before it became the default.
    p.add_argument("--create-user", dest="create_user", action="store_true",
                   help=argparse.SUPPRESS)
    p.add_argument("--now", action="store_true",
                   help="also run systemctl daemon-reload and enable --now the services")
    p.set_defaults(func=_run)
