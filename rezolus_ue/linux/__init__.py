"""Kernel ABIs rezolus-ue speaks directly: one module per interface (uprobe_events, ...)."""
