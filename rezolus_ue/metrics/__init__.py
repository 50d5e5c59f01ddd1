"""The metric core: H2 histogram layout, metric families, the agent's histogram, the
catalog (collected from the samplers' declarations)."""

from .family import Family, Kind, Label, Metric, Oversampler, counter, gauge, histogram
from .types import Histogram

__all__ = ["Family", "Histogram", "Kind", "Label", "Metric",
           "Oversampler", "counter", "gauge", "histogram"]
