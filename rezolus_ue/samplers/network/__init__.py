"""Network samplers: per interface traffic (interfaces.py), TCP/UDP counters (protocol.py)."""
