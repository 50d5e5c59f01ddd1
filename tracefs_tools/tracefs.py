"""The Tracefs facade: files under a tracefs root, with OS errors translated once, here."""

from __future__ import annotations

import errno
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from .errors import EventNotFound, TracefsError, TracefsPermissionError
from .format import EventFormat, parse_format
from .mounts import find_tracefs
from .rawio import write_once
from .status import UserEventsStatus, parse_user_events_status

__all__ = ["Tracefs"]


class Tracefs:
    """One tracefs mount; `root` is injectable so tests can use a fixture tree."""

    def __init__(self, root: str | Path | None = None) -> None:
        self.root = Path(root) if root is not None else find_tracefs()

    def __repr__(self) -> str:
        return f"Tracefs({str(self.root)!r})"

    # -- paths -------------------------------------------------------------------------------

    def path(self, *parts: str | os.PathLike[str], instance: str | None = None) -> Path:
        """Return root/parts, or root/instances/<instance>/parts."""
        base = self.root if instance is None else self.root / "instances" / _name(instance)
        return base.joinpath(*parts)

    def _event_path(self, group: str, name: str, *parts: str, instance: str | None = None) -> Path:
        return self.path("events", _name(group), _name(name), *parts, instance=instance)

    # -- error translation -------------------------------------------------------------------

    @contextmanager
    def _boundary(self, path: Path, missing: str | None = None) -> Iterator[None]:
        """Translate OSError on `path`; `missing` is the EventNotFound message for ENOENT."""
        try:
            yield
        except OSError as e:
            raise self._translate(e, path, missing) from e

    def _translate(self, e: OSError, path: Path, missing: str | None) -> TracefsError:
        if e.errno in (errno.ENOENT, errno.ENOTDIR) and missing is not None:
            return EventNotFound(missing)
        if e.errno == errno.EINTR and path.name == "enable":
            return TracefsError(f"{path}: interrupted system call: a uprobe event is traced"
                                " either by ftrace or by perf-based tools, not both at once;"
                                " stop the other consumer first")
        if e.errno in (errno.EACCES, errno.EPERM):
            return TracefsPermissionError(
                f"{path}: {e.strerror}. Run as root, or give a group access to tracefs: "
                f"`mount -o remount,gid=<group> {self.root}` (or `chgrp -R <group> {self.root}"
                f" && chmod -R g+rwX {self.root}`) and add your user to that group"
            )
        return TracefsError(f"{path}: {e.strerror or e}")

    def _event_missing(self, group: str, name: str, instance: str | None) -> str:
        where = self.path(instance=instance)
        return f"event {group}/{name} not found in {where}; is it registered?"

    def _instance_missing(self, instance: str | None) -> str | None:
        if instance is None:
            return None
        return f"instance {instance} not found in {self.root}; create it with create_instance()"

    def _read(self, path: Path, missing: str | None = None) -> str:
        with self._boundary(path, missing), open(path, "rb") as f:
            return f.read().decode("utf-8", errors="replace")

    def _write(self, path: Path, data: str, missing: str | None = None) -> None:
        # os.write, not a buffered file: tracefs reports EINVAL/EBUSY on write(2), and a
        # buffered writer would defer the error to close(). No O_CREAT: never make files.
        with self._boundary(path, missing):
            fd = os.open(path, os.O_WRONLY)
            try:
                write_once(fd, data.encode())
            finally:
                os.close(fd)

    def _subdirs(self, path: Path, missing_ok: bool = False) -> list[str]:
        try:
            with os.scandir(path) as it:
                return sorted(e.name for e in it if e.is_dir(follow_symlinks=False))
        except (FileNotFoundError, NotADirectoryError):
            if missing_ok:
                return []
            raise TracefsError(f"{path}: no such directory; is {self.root} tracefs?") from None
        except OSError as e:
            raise self._translate(e, path, None) from e

    def _exists(self, path: Path) -> bool:
        try:
            os.stat(path)
            return True
        except (FileNotFoundError, NotADirectoryError):
            return False
        except OSError as e:
            raise self._translate(e, path, None) from e

    # -- events ------------------------------------------------------------------------------

    @property
    def has_user_events(self) -> bool:
        """Return True if the kernel has user_events (CONFIG_USER_EVENTS, Linux 6.4+)."""
        return self._exists(self.path("user_events_data"))

    def groups(self) -> list[str]:
        """Return the event groups (subsystems) under events/, sorted."""
        return self._subdirs(self.path("events"))

    def events(self, group: str) -> list[str]:
        """Return the events of `group`, sorted; [] if the group does not exist."""
        return self._subdirs(self.path("events", _name(group)), missing_ok=True)

    def event_exists(self, group: str, name: str) -> bool:
        """Return True if events/<group>/<name> exists."""
        return self._exists(self._event_path(group, name))

    def event_format(self, group: str, name: str) -> EventFormat:
        """Return the parsed events/<group>/<name>/format."""
        path = self._event_path(group, name, "format")
        text = self._read(path, self._event_missing(group, name, None))
        try:
            return parse_format(text)
        except ValueError as e:
            raise TracefsError(f"{path}: {e}") from e

    def event_id(self, group: str, name: str) -> int:
        """Return the event's id (the perf_event_attr.config of a tracepoint)."""
        path = self._event_path(group, name, "id")
        text = self._read(path, self._event_missing(group, name, None))
        try:
            return int(text.strip())
        except ValueError as e:
            raise TracefsError(f"{path}: expected an integer, got {text!r}") from e

    def is_enabled(self, group: str, name: str, instance: str | None = None) -> bool:
        """Return True if the event is enabled in the instance (top level if None)."""
        path = self._event_path(group, name, "enable", instance=instance)
        # "0", "1", or "0*"/"1*" when soft-(dis)abled by a trigger: the first char decides.
        text = self._read(path, self._event_missing(group, name, instance))
        return text.startswith("1")

    def enabled_in(self, group: str, name: str) -> list[str | None]:
        """Return where ftrace has the event enabled: None for the top-level buffer, then
        each instance's name, sorted; an event or instance removed meanwhile is not an
        error, it is simply not there."""
        where: list[str | None] = []
        for instance in (None, *self.instances()):
            try:
                if self.is_enabled(group, name, instance=instance):
                    where.append(instance)
            except EventNotFound:
                continue
        return where

    def enable(self, group: str, name: str, instance: str | None = None) -> None:
        """Enable the event in the instance (top level if None)."""
        path = self._event_path(group, name, "enable", instance=instance)
        self._write(path, "1", self._event_missing(group, name, instance))

    def disable(self, group: str, name: str, instance: str | None = None) -> None:
        """Disable the event in the instance (top level if None)."""
        path = self._event_path(group, name, "enable", instance=instance)
        self._write(path, "0", self._event_missing(group, name, instance))

    # -- instances ---------------------------------------------------------------------------

    def create_instance(self, name: str) -> Path:
        """Return the path of instance `name`, creating it if it does not exist."""
        path = self.path(instance=name)
        try:
            os.mkdir(path)
        except FileExistsError:
            pass
        except OSError as e:
            raise self._translate(e, path, None) from e
        return path

    def remove_instance(self, name: str) -> None:
        """Remove instance `name`; raise EventNotFound if it does not exist."""
        path = self.path(instance=name)
        missing = self._instance_missing(name)
        # Disable its events first: rmdir fails with EBUSY while an event is in use.
        self._write(self.path("events", "enable", instance=name), "0", missing)
        with self._boundary(path, missing):
            os.rmdir(path)

    def instances(self) -> list[str]:
        """Return the names of the existing instances, sorted."""
        return self._subdirs(self.path("instances"), missing_ok=True)

    def read_trace(self, instance: str | None = None) -> str:
        """Return the contents of `trace` (the ring buffer, without consuming it)."""
        return self._read(self.path("trace", instance=instance), self._instance_missing(instance))

    def clear_trace(self, instance: str | None = None) -> None:
        """Empty the ring buffer of the instance (top level if None)."""
        path = self.path("trace", instance=instance)
        # Opening `trace` with O_TRUNC is what resets the buffer (like `> trace`).
        with self._boundary(path, self._instance_missing(instance)):
            os.close(os.open(path, os.O_WRONLY | os.O_TRUNC))

    # -- dynamic and user events -------------------------------------------------------------

    def user_events_status(self) -> UserEventsStatus:
        """Return the parsed `user_events_status`."""
        path = self.path("user_events_status")
        if not self._exists(path):
            raise TracefsError(
                f"{path} does not exist: this kernel lacks user_events "
                "(CONFIG_USER_EVENTS, Linux 6.4+)"
            )
        return parse_user_events_status(self._read(path))

    @property
    def has_uprobe_events(self) -> bool:
        """Return True if this kernel can define uprobe events (CONFIG_UPROBE_EVENTS)."""
        return self._exists(self.path("uprobe_events"))

    def dynamic_events(self) -> list[str]:
        """Return the lines of `dynamic_events` (kprobes, uprobes, synthetic and user events)."""
        return [line for line in self._read(self.path("dynamic_events")).splitlines() if line]


def _name(part: str) -> str:
    """Return `part` if it is a single path component; raise ValueError otherwise."""
    if not part or "/" in part or part in (".", ".."):
        raise ValueError(f"not a valid tracefs name: {part!r}")
    return part
