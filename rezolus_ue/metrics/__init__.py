"""The metric core: H2 histogram layout, metric families, runtime values, the catalog."""

from .family import Family, Kind, Label, Metric, Oversampler, counter, gauge, histogram
from .types import Counter, Gauge, Histogram

__all__ = ["Counter", "Family", "Gauge", "Histogram", "Kind", "Label", "Metric",
           "Oversampler", "counter", "gauge", "histogram"]
