"""Tests of the metrics edge (Prometheus queries, collector, EPP scraping)."""

from adapter.metrics.queries import ESSENTIAL_QUERIES, QueryName

V1_QUERIES = frozenset(
    {*ESSENTIAL_QUERIES, QueryName.REQUEST_COUNT, QueryName.EPP_QUEUE_SIZE, QueryName.EPP_QUEUE_BYTES}
)
"""What the percentage-based analyzer, the scale-to-zero enforcer and scale-from-zero read: a collection that asks
for fewer queries than `serve` (which asks for all), for the tests of metric selection and tests/bench_collect.py."""
