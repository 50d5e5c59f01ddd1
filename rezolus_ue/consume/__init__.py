"""Consumers: read rezolus-ue tracepoints like any tool does, and show or keep them."""
