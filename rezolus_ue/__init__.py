"""rezolus-ue: systems telemetry published as Linux user_events tracepoints."""

__version__ = "0.1.0"
