"""The SAMPLER panel: each failed, unavailable or once-failing sampler with its error count
and why, cut to a line; and the samplers screen (key e): every sampler, the why wrapped.
Reads ``rezolus_agent_status``, one record per sampler per publish."""

from __future__ import annotations

import textwrap
from collections.abc import Sequence
from dataclasses import dataclass

from rich.text import Text

from ...samplers.agent import AGENT_STATUS
from .frame import Frame, Model, Read, View
from .keys import UiState
from .layout import Block, Panel
from .widgets import Line, clean, fit, fmt_int


@dataclass(frozen=True, slots=True)
class SamplerRow:
    """One sampler as the agent's latest ``rezolus_agent_status`` record says."""

    sampler: str
    state: str  # idle, active, failed, unavailable, disabled
    reason: str
    last_error: str
    errors: int

    @property
    def why(self) -> str:
        """Return why it is in its state: the error while failed, else the reason."""
        return self.last_error if self.state == "failed" else self.reason


#: Samplers the panel lists, by state, worst first; any other with errors comes after.
TROUBLE = {"failed": 0, "unavailable": 1}
STATE_STYLE = {"failed": "bold red", "unavailable": "yellow"}


def derive(f: Frame) -> tuple[SamplerRow, ...]:
    """Return each sampler of the agent's latest status publish (and the one before,
    while this one is arriving); none once the status records stopped."""
    return tuple(SamplerRow(s.text("sampler"), s.text("state"), s.text("reason"),
                            s.text("last_error"), s.int("errors"))
                 for _key, s in f.of(AGENT_STATUS.event))


def rows(v: View) -> tuple[SamplerRow, ...]:
    """Return the samplers of ``v``."""
    r = v.rows.get(NAME)
    return r if isinstance(r, tuple) else ()


def troubled(samplers: Sequence[SamplerRow]) -> list[SamplerRow]:
    """Return the samplers to tell the user about, worst first: failed, unavailable, then
    any that recovered from errors (disabled ones were the user's choice)."""
    out = [r for r in samplers if r.state in TROUBLE or r.errors]
    return sorted(out, key=lambda r: (TROUBLE.get(r.state, 2), -r.errors, r.sampler))


def _why(r: SamplerRow) -> str:
    """Return why a sampler is listed: its reason or error; for one that recovered, its
    latest error too."""
    why = clean(r.why)
    if r.state not in TROUBLE and r.last_error:
        why = (why or "recovered") + f"; latest error: {clean(r.last_error)}"
    return why or "-"


def _head(r: SamplerRow, name_w: int) -> Line:
    """Return a sampler line's columns before the why: name, state, errors."""
    line = Line()
    line.append(clean(r.sampler)[:name_w].ljust(name_w), "bold")
    line.append(" ")
    line.append(r.state.ljust(11), STATE_STYLE.get(r.state, "dim"))
    line.append(fmt_int(r.errors).rjust(5), "red" if r.errors else "dim")
    line.append("  ")
    return line


def block(model: Model, ui: UiState, width: int) -> Block | None:
    """Return the panel's block: a title and a line per troubled sampler."""
    shown = troubled(rows(model.view))
    if not shown:
        return None
    name_w = max(7, min(18, max(len(r.sampler) for r in shown)))

    def draw(lines: int) -> list[Text]:
        part = shown[: max(lines - 1, 0)]
        more = len(shown) - len(part)
        title = f"{'SAMPLER'.ljust(name_w)} {'state'.ljust(11)}{'err'.rjust(5)}  why" + (
            f"  +{more} (e)" if more else "  (e: every sampler)")
        out = [fit(Text(title, "bold"), width)]
        for r in part:
            line = _head(r, name_w)
            line.append(_why(r))
            out.append(fit(line.text(), width))
        return out

    return Block(tuple(range(2, len(shown) + 2)), draw, prio=1)


def screen(v: View, width: int, height: int) -> list[Text]:
    """Return the samplers screen (key e): every sampler, its state, errors and why, the
    why wrapped rather than cut."""
    every = sorted(rows(v), key=lambda r: (TROUBLE.get(r.state, 2), r.sampler))
    out = [Text("Samplers of the running agent, as it publishes them"
                " (rezolus_agent_status); e or Esc returns", "bold")]
    if not every:
        out.append(Text("no rezolus_agent_status record yet: the agent publishes one per"
                        " sampler every interval while a consumer has it enabled", "dim"))
    name_w = max((len(r.sampler) for r in every), default=7)
    indent = name_w + 1 + 11 + 5 + 2
    for r in every:
        chunks = textwrap.wrap(_why(r), max(width - indent, 10)) or [""]
        line = _head(r, name_w)
        line.append(chunks[0])
        out.append(fit(line.text(), width))
        out += [fit(Text(" " * indent + c), width) for c in chunks[1:]]
    return out[:height]


NAME = "samplers"
PANEL = Panel(
    NAME, (Read(AGENT_STATUS, identity=("sampler",)),), derive, block, "right",
    help=(("SAMPLER", "failed and unavailable samplers, errors and why"
           " (rezolus_agent_status)"),))
