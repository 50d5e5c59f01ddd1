"""The sampler registry. A sampler is one folder here: its ``__init__.py`` declares the
families it publishes (and, with its docstring, what it reads), ``sampler.py`` holds the
class whose ``name`` is the folder's name. Adding one is a folder, one line in ``NAMES``
and a config section (generated): docs/add-a-sampler.md. A test checks every registered
sampler is in configs/default.toml.

Importing a sampler's declarations (``rezolus_ue.samplers.cpu_usage``) does not import the
sampler classes: consumers read the families without loading samplers. ``REGISTRY`` and
the rest import the classes on first use."""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..config import Option
    from .base import Roots, Sampler, SamplerContext

#: Every sampler, in documentation order (docs/events.md, configs/default.toml).
NAMES = (
    "cpu_usage",
    "cpu_softirq",
    "cpu_softirq_time",
    "cpu_frequency",
    "cpu_migrations",
    "cpu_interrupts",
    "scheduler",
    "scheduler_runqueue",
    "syscall",
    "memory",
    "blockio",
    "blockio_requests",
    "network",
    "network_protocol",
    "network_traffic",
    "tcp",
    "tcp_traffic",
    "perf_software",
    "perf_hardware",
    "cgroup",
    "cgroup_scheduler",
    "processes",
    "agent",
)


def sampler_class(name: str) -> type[Sampler]:
    """Return the class of sampler ``name``: the one in its ``sampler.py`` named so."""
    from .base import Sampler

    module = import_module(f"{__name__}.{name}.sampler")
    for obj in vars(module).values():
        if (isinstance(obj, type) and issubclass(obj, Sampler)
                and obj.__module__ == module.__name__ and getattr(obj, "name", None) == name):
            return obj
    raise LookupError(f"{module.__name__} defines no Sampler named {name!r}")


def options() -> dict[str, tuple[Option, ...]]:
    """Return every sampler's option table, keyed by sampler name."""
    from ..config import sampler_options

    return sampler_options({n: cls.options for n, cls in _registry().items()})


def default_config() -> str:
    """Return configs/default.toml: every option at its default, each sampler's summary
    above its table (what ``install-service`` writes, and the docs check)."""
    from ..config import render_default

    return render_default(options(), {n: c.summary() for n, c in _registry().items()})


_REGISTRY: dict[str, type[Sampler]] = {}


def _registry() -> dict[str, type[Sampler]]:
    if not _REGISTRY:
        _REGISTRY.update((n, sampler_class(n)) for n in NAMES)
    return _REGISTRY


def __getattr__(attr: str) -> Any:
    """``REGISTRY`` (name -> class) and the base types, imported on first use."""
    if attr == "REGISTRY":
        return _registry()
    if attr in ("Roots", "Sampler", "SamplerContext"):
        from . import base

        return getattr(base, attr)
    raise AttributeError(f"module {__name__!r} has no attribute {attr!r}")


REGISTRY: dict[str, type[Sampler]]
__all__ = ["NAMES", "REGISTRY", "Roots", "Sampler", "SamplerContext", "default_config",
           "options", "sampler_class"]
