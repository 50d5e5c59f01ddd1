"""Consumers: read rezolus-ue tracepoints like any tool does, and show or keep them.

One record source, many consumers (``rezolus_ue.api`` is the public face):

* records: ``records`` (Record: fields apart from metadata, Histogram, the JSON form);
  ``source`` (open_source: live or a recording), ``subscription`` (the live one:
  perf_event_open rings), ``readiness`` (why records do not come), ``otlp``
  (applications' OpenTelemetry points), ``intervals`` (publish intervals: boundaries,
  rates, staleness, for every consumer).
* ``recording``, a package: recordings in every format behind one reader and one writer
  (the native format, Parquet, the flight recorder's ring), and the ``record`` and
  ``dump`` commands.
* commands: ``tail``; ``exporter`` (HTTP) over ``prometheus`` (names, state, exposition);
  ``top``, a package: a module per panel over ``frame`` (the model), ``layout``,
  ``widgets`` and ``keys`` (its ``__init__`` has the map); ``view``, a package: the web
  dashboard (pages, model, server, vendored static files).
"""
