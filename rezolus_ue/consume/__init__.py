"""Consumers: read rezolus-ue tracepoints like any tool does, and show or keep them.

One record source, many consumers (``rezolus_ue.api`` is the public face):

* records: ``records`` (Record: fields apart from metadata, Histogram, the JSON form);
  ``source`` (open_source: live or a recording), ``subscription`` (the live one:
  perf_event_open rings).
* recordings: ``recblocks`` (framing, CRC) < ``rectables`` (columnar tables) <
  ``recparquet`` (Parquet) < ``recfile`` (whole recordings, output files);
  ``segments`` (the flight recorder's ring directory).
* commands: ``tail``; ``record`` in ``recorder``; ``dump``; ``exporter`` (HTTP) over
  ``prometheus`` (names, state, exposition); ``top``, a package: a module per panel over
  ``frame`` (the model), ``layout``, ``widgets`` and ``keys`` (its ``__init__`` has the map).
"""
