"""A Ray replica's Prometheus metrics (`metrics.ServerMetrics`) copied into Ray Serve's metrics,
so that Ray's metrics agent exports every replica's at once, each sample tagged with its
application, deployment and replica, its name prefixed with `ray_` (Ray's rule).

Copied every `PERIOD_S` seconds. Counters stay counters (the increase since the last copy is
added); every other sample is a gauge set to its value: a histogram's `_bucket`, `_sum` and
`_count` samples keep their names and `le` labels that way (Ray would end a counter's name in
`_total`), so `histogram_quantile` and `rate` read them as they read the histogram.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry
from ray.serve import metrics

PERIOD_S = 5.0
MIRRORED = {"counter": ("_total",), "gauge": ("",), "histogram": ("_bucket", "_sum", "_count")}


class RayMetricsMirror:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.registry = registry
        self.metrics: dict[str, metrics.Counter | metrics.Gauge] = {}
        self.copied: dict[tuple, float] = {}  # a counter sample's value at the last copy

    def copy(self) -> None:
        for family in self.registry.collect():
            for sample in family.samples:
                if not sample.name.endswith(MIRRORED.get(family.type, ("-",))):
                    continue  # `_created` timestamps
                counted = family.type == "counter"
                metric = self._metric(sample.name, counted, tuple(sorted(sample.labels)),
                                      family.documentation)
                tags = sample.labels or None
                if not counted:
                    metric.set(sample.value, tags=tags)
                    continue
                key = (sample.name, tuple(sorted(sample.labels.items())))
                increase = sample.value - self.copied.get(key, 0.0)
                if increase > 0:
                    metric.inc(increase, tags=tags)
                    self.copied[key] = sample.value

    def _metric(self, name: str, counted: bool, tag_keys: tuple[str, ...],
                description: str) -> metrics.Counter | metrics.Gauge:
        if name not in self.metrics:
            kind = metrics.Counter if counted else metrics.Gauge
            # Ray takes ASCII descriptions only: one with "τ" raised, and the copying ended
            ascii_description = description.encode("ascii", "replace").decode("ascii")
            self.metrics[name] = kind(name, description=ascii_description, tag_keys=tag_keys)
        return self.metrics[name]
