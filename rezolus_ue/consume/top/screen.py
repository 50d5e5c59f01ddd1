"""``rezolus-ue top``: one screen from the latest frame. Pure: ``render(model, width,
height, ui)`` returns a rich ``Text`` of exactly the screen's lines: the header panel's,
then the body (the panels, or the help, samplers or waiting screen), then the key line."""

from __future__ import annotations

import textwrap

from rich.text import Text

from . import samplers
from .frame import Model
from .keys import SORT_MODES, UiState, keys_for
from .layout import body
from .registry import PANELS, top_events
from .widgets import Screen, fit


def _header(model: Model, ui: UiState, width: int) -> list[Text]:
    out: list[Text] = []
    for p in PANELS:
        if p.place == "header":
            b = p.block(model, ui, width)
            if b is not None:
                out += b.draw(b.sizes[0])
    return out


def footer(ui: UiState, width: int) -> Text:
    """Return the key line (or the filter being typed): the keys that fit, the least
    needed left out first."""
    if ui.editing:
        t = Text.assemble(("filter: ", "bold"), (ui.filter, "bold cyan"), ("▏", "blink"),
                          ("  Enter keep  Esc clear", "dim"))
        return fit(t, width)
    if ui.goto is not None:
        t = Text.assemble(("go to: ", "bold"), (ui.goto, "bold cyan"), ("▏", "blink"),
                          ("  HH:MM:SS, 90s from the start, +10s/-1m from here;"
                           " Enter go  Esc cancel", "dim"))
        return fit(t, width)
    if ui.goto_error:
        return fit(Text(f"go to: {ui.goto_error}", "bold red"), width)
    keys = [k for k in keys_for(ui.replay) if k.short]
    while len(keys) > 1 and sum(len(k.short) + len(k.what) + 3 for k in keys) > width:
        keys.remove(max(keys, key=lambda k: k.drop))
    t = Text()
    for k in keys:
        if t.cell_len + len(k.short) + len(k.what) + 3 > width:
            break
        t.append(f" {k.short}", "bold reverse")
        t.append(f" {k.what} ")
    return t


def help_lines(replay: bool = False) -> list[tuple[str, str]]:
    """Return the help screen's lines: every key (of a replay, or live), then what each
    panel shows and the column each sort mode sorts its table by."""
    out = [(k.keys, k.help) for k in keys_for(replay)] + [("", "")]
    for p in PANELS:
        entries = list(p.help)
        if p.sorts and entries:
            name, what = entries[-1]
            entries[-1] = (name, what + "; sort " + "/".join(
                f"{col}" if col == m.name else f"{m.name}={col}"
                for m, col in zip(SORT_MODES, p.sorts, strict=True)))
        out += entries
    return out


def _help(width: int, height: int, replay: bool) -> list[Text]:
    entries = help_lines(replay)
    key_w = max(len(k) for k, _ in entries) + 2
    out = [Text("Keys and panels", "bold underline"), Text()]
    for k, what in entries:
        out.append(fit(Text.assemble((k.ljust(key_w), "bold cyan"), what), width))
    return out[:height]


def render(model: Model, width: int, height: int, ui: UiState) -> Text:
    """Return the screen for ``model``'s latest frame: ``height`` lines of ``width`` cells.

    Non-interactive (``--once``) output has no key footer and is not padded.
    """
    return render_screen(model, width, height, ui).text()


def render_screen(model: Model, width: int, height: int, ui: UiState) -> Screen:
    """Return ``render``'s screen as its lines, which the live view draws directly."""
    width = max(width, 20)
    head = _header(model, ui, width)
    foot = [footer(ui, width)] if ui.interactive else []
    room = max(height - len(head) - len(foot), 0)
    v = model.view
    if ui.help:
        lines = _help(width, room, ui.replay)
    elif ui.samplers:
        lines = samplers.screen(v, width, room)
    elif not v.frame:
        lines = _waiting(model, width, ui)
    else:
        lines = body(PANELS, model, ui, width, room) or [
            Text("no panel data: the samplers top reads are idle, disabled or unavailable"
                 " (see `rezolus-ue events`)", "dim")]
    if ui.interactive:
        lines += [Text()] * (room - len(lines))
    return Screen([*head, *lines[:room], *foot])


def _waiting(model: Model, width: int, ui: UiState) -> list[Text]:
    """Return the body before the first frame: what top waits for and subscribed to."""
    wanted = top_events(ui.costly)
    # Applications' events are never waited for: what top awaits is the agent's.
    subscribed = model.subscribed if model.subscribed is None else tuple(
        e for e in model.subscribed if e in wanted)
    if subscribed is None:
        head = f"subscribing to {len(wanted)} events..."
    elif model.waiting:
        head = f"waiting: {model.waiting}"
    elif not subscribed:
        head = ("waiting for the agent: none of top's events is registered (start it:"
                " sudo rezolus-ue run); top subscribes as soon as they are")
    else:
        head = "waiting for the first records from the agent..."
    out = [Text(ln, "bold") for ln in textwrap.wrap(head, max(width, 20),
                                                    subsequent_indent="  ")]
    if subscribed:
        missing = [e for e in wanted if e not in subscribed]
        lines = [f"subscribed to {len(subscribed)} of {len(wanted)} events: "
                 + ", ".join(subscribed)]
        if missing:
            lines.append("not registered (yet): " + ", ".join(missing)
                         + " (their samplers may be disabled or unavailable: key e, or"
                         " rezolus-ue events)")
        for text in lines:
            out += [Text(ln, "dim") for ln in textwrap.wrap(text, max(width, 20),
                                                            subsequent_indent="  ")]
    return out
