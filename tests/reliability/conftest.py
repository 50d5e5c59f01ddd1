"""Reliability suite: the kernel-facing parts run in the VM tier (``kernel`` marker) with
the fixtures of tests/kernel; fuzzing runs in-process."""

from __future__ import annotations

from kernel.conftest import instance, tracefs, wait_for  # noqa: F401 - fixtures re-exported
