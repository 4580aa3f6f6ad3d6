"""/metrics: the read model's counters and gauges in Prometheus' text format (prometheus_client renders it)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric

from projections.readmodel.fold import WAIT_BUCKETS

if TYPE_CHECKING:
    from projections.readmodel.projector import Projector

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


class ReadModelCollector:
    """Reads the read model at scrape time (no state of its own)."""

    def __init__(self, projector: Projector) -> None:
        self.projector = projector

    def collect(self) -> Iterator[Metric]:
        store, cells = self.projector.store, self.projector.cells
        jobs = GaugeMetricFamily("gangway_jobs", "Jobs by state and team", labels=["cell", "team", "state"])
        gpus = GaugeMetricFamily("gangway_gpus", "GPUs by state", labels=["cell", "state"])
        admissions = CounterMetricFamily("gangway_admissions", "Gangs admitted, by team", labels=["cell", "team"])
        preemptions = CounterMetricFamily("gangway_preemptions", "Preemptions requested, by reason",
                                          labels=["cell", "reason"])
        refused = CounterMetricFamily("gangway_records_refused", "Records the cell refused to fold, by reason "
                                      "(NOT_ITS_WRITER: a record its writer may not write)", labels=["cell", "reason"])
        wait = HistogramMetricFamily("gangway_queue_wait_seconds", "Queue wait of admitted gangs (event time)",
                                     labels=["cell"])
        lag_seconds = GaugeMetricFamily("gangway_projector_lag_seconds",
                                        "Seconds since the read model last stood at the end of the log", labels=["cell"])
        lag_records = GaugeMetricFamily("gangway_projector_lag_records", "Records the read model is behind the log",
                                        labels=["cell"])
        offset = GaugeMetricFamily("gangway_projector_offset", "Last offset folded into the read model", labels=["cell"])
        now = time.monotonic()
        for cell in cells:
            summary = store.summary(cell) or {"jobs_by_team": {}, "gpus": {}}
            for team, states in sorted(summary["jobs_by_team"].items()):
                for state, n in sorted(states.items()):
                    jobs.add_metric([cell, team, state], n)
            for state, n in sorted(summary["gpus"].items()):
                gpus.add_metric([cell, state], n)
            counters = store.metrics(cell) or {"admissions": {}, "preemptions": {}, "wait_buckets": [],
                                               "wait_sum_ms": 0}
            for team, n in sorted(counters["admissions"].items()):
                admissions.add_metric([cell, team], n)
            for reason, n in sorted(counters["preemptions"].items()):
                preemptions.add_metric([cell, reason], n)
            for reason, n in sorted(counters.get("refused", {}).items()):
                refused.add_metric([cell, reason], n)
            cumulative, buckets = 0, []
            for bound, n in zip(WAIT_BUCKETS, counters["wait_buckets"]):
                cumulative += n
                buckets.append((str(bound), cumulative))
            buckets.append(("+Inf", counters.get("wait_count", cumulative)))
            wait.add_metric([cell], buckets, counters["wait_sum_ms"] / 1000)
            lag = self.projector.lag[cell]
            lag_seconds.add_metric([cell], lag.seconds(now))
            lag_records.add_metric([cell], lag.behind)
            offset.add_metric([cell], lag.offset)
        yield from (jobs, gpus, admissions, preemptions, refused, wait, lag_seconds, lag_records, offset)


def exposition(projector: Projector) -> bytes:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(ReadModelCollector(projector))
    return generate_latest(registry)
