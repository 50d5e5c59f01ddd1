"""``rezolus-ue config check | show``: validate a config file, print the effective config.

``check`` runs exactly the validation ``run`` does (including the refusal of a file others
could change, when privileged) and nothing else. ``show`` prints the user's file
round-tripped through tomlkit, so its comments, order and layout stay, with every option
the file leaves out added as a real value marked ``# default`` (in inline tables, which
cannot hold comments, unmarked). The output is itself a valid config that ``run`` reads
as the same configuration.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping
from pathlib import Path

import tomlkit
import tomlkit.items

from . import config as cfg
from .errors import ConfigError

#: The trailing comment of a value ``show`` filled in.
DEFAULT_MARK = "default"
STDIN = Path("-")


def _load(path: Path) -> tuple[cfg.Config, str | None]:
    """Return the validated config in ``path`` (``-``: stdin) and its text."""
    from .samplers import options

    if path == STDIN:
        try:
            text = cfg.read_bounded(sys.stdin, "<stdin>")
        except UnicodeDecodeError:
            raise ConfigError("<stdin>: not text (expected UTF-8 TOML)") from None
        return cfg.parse(text, options(), Path("<stdin>")), text
    text = cfg.read_text(path)  # once: a pipe cannot be read twice
    return cfg.parse(text, options(), path), text


def _toml_value(opt: cfg.Option, value: object) -> object:
    """Return an effective (converted) value as it is written in TOML."""
    if opt.kind == "duration":
        return cfg.format_duration(int(value))  # type: ignore[call-overload]
    return list(value) if isinstance(value, tuple) else value


def _fill(table: tomlkit.items.Table | tomlkit.items.InlineTable,
          options: tuple[cfg.Option, ...], values: Mapping[str, object]) -> None:
    """Add to ``table`` every option it lacks, at its effective value."""
    for opt in options:
        if opt.key in table:
            continue
        item = tomlkit.item(_toml_value(opt, values[opt.key]))
        if not isinstance(table, tomlkit.items.InlineTable):
            derived = values[opt.key] != opt.convert(opt.default)
            # Only sample_interval differs from its default: publish_interval caps it.
            item.comment(f"{DEFAULT_MARK} {tomlkit.item(opt.toml_default()).as_string()}"
                         " capped at publish_interval" if derived else DEFAULT_MARK)
        table[opt.key] = item


def _child(parent: tomlkit.items.Table | tomlkit.items.InlineTable | tomlkit.TOMLDocument,
           key: str, **kw: bool) -> tomlkit.items.Table | tomlkit.items.InlineTable:
    """Return table ``key`` of ``parent``, adding an empty one (inline in an inline)."""
    t = parent.get(key)
    if t is None:
        inline = isinstance(parent, tomlkit.items.InlineTable)
        t = tomlkit.inline_table() if inline else tomlkit.table(**kw)
        parent[key] = t
    return t


def effective(text: str, conf: cfg.Config,
              samplers: Mapping[str, tuple[cfg.Option, ...]]) -> str:
    """Return ``text`` (a valid config) with every option it leaves out filled in."""
    doc = tomlkit.parse(text)
    _fill(_child(doc, "agent"), cfg.AGENT_OPTIONS, conf.agent)
    section = _child(doc, "samplers", is_super_table=True)
    for name, opts in samplers.items():
        _fill(_child(section, name), opts, conf.samplers[name])
    return tomlkit.dumps(doc)


def _cmd_check(args: argparse.Namespace) -> int:
    from .samplers import options

    path = args.file
    try:
        if path is None and not cfg.SYSTEM_CONFIG.exists():
            # What `run` does without --config: not an error, the defaults apply.
            conf, source = cfg.defaults(options()), (
                f"{cfg.SYSTEM_CONFIG} does not exist: `rezolus-ue run` uses the built-in"
                " defaults")
        else:
            conf, _ = _load(path or cfg.SYSTEM_CONFIG)
            source = f"{conf.path}: ok"
        # The flight recorder checks its rules against the catalog at start: so does this.
        from .consume.recording.triggers import rules

        checked = rules(conf.triggers, conf.path)
    except ConfigError as e:
        print(e, file=sys.stderr)
        return 1
    enabled = sum(conf.sampler_enabled(n) for n in conf.samplers)
    more = f", {len(checked)} trigger rule{'s' * (len(checked) != 1)}" if checked else ""
    print(f"{source} ({enabled} of {len(conf.samplers)} samplers enabled{more})")
    return 0


def _cmd_show(args: argparse.Namespace) -> int:
    from .samplers import options

    path = args.file
    if path is None and cfg.SYSTEM_CONFIG.exists():
        path = cfg.SYSTEM_CONFIG
    try:
        if path is None:
            conf, text = cfg.defaults(options()), ""
            source = f"built-in defaults ({cfg.SYSTEM_CONFIG} does not exist)"
        else:
            conf, text = _load(path)
            source = "standard input" if path == STDIN else str(path)
    except ConfigError as e:
        print(e, file=sys.stderr)
        return 1
    print(f"# Effective rezolus-ue configuration: {source}.\n"
          f"# Values marked '# {DEFAULT_MARK}' are not in the file: they are the defaults"
          " it runs with.")
    sys.stdout.write(effective(text or "", conf, options()))
    return 0


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Add the ``config`` subcommand (``check``, ``show``) to the CLI's subparsers."""
    fmt = argparse.RawDescriptionHelpFormatter
    p = sub.add_parser(
        "config", formatter_class=fmt, help="validate a config file or show the effective config",
        description="Validate a configuration file without running the agent, or print the"
        " effective configuration with every default filled in.",
        epilog="examples:\n"
        f"  rezolus-ue config check {cfg.SYSTEM_CONFIG}\n"
        "  rezolus-ue config show\n"
        "  rezolus-ue config show my.toml | rezolus-ue config check -",
    )
    actions = p.add_subparsers(dest="config_command", metavar="ACTION",
                               parser_class=type(p), required=True)
    chk = actions.add_parser(
        "check", formatter_class=fmt, help="validate FILE; exit 0 if valid, 1 if not",
        description="Validate FILE as `run` would, without running anything. Prints"
        " 'FILE: ok' and exits 0, or prints the first problem as FILE:LINE: message and"
        f" exits 1. Without FILE, checks {cfg.SYSTEM_CONFIG}, or, when it does not exist,"
        " says that `run` uses the built-in defaults (exit 0). When run as root or with"
        " capabilities, a file writable by its group or others, or owned by another user,"
        " is refused as `run` refuses it.",
    )
    chk.add_argument("file", metavar="FILE", type=cfg.path_arg, nargs="?",
                     help=f"the TOML file, '-' for standard input (default:"
                     f" {cfg.SYSTEM_CONFIG}, else the built-in defaults)")
    chk.set_defaults(func=_cmd_check)
    show = actions.add_parser(
        "show", formatter_class=fmt,
        help="print the effective config: FILE with every default filled in",
        description="Print FILE (default: the file `run` would read, else the built-in"
        " defaults) with its comments and layout kept and every option it leaves out added"
        f" at its default value, marked '# {DEFAULT_MARK}'. The output is a valid config"
        " that `run` reads as the same configuration.",
    )
    show.add_argument("file", metavar="FILE", type=cfg.path_arg, nargs="?",
                      help=f"the TOML file, '-' for standard input (default:"
                      f" {cfg.SYSTEM_CONFIG} if it exists, else the built-in defaults)")
    show.set_defaults(func=_cmd_show)
