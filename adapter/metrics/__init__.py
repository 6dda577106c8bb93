"""The metrics edge: PromQL builders, the Prometheus collector and direct EPP scraping.

The only package that imports `prometheus_api_client` (import-linter contract). It turns what Prometheus and
the EPP pods say into `adapter.domain.cluster.Collection` values and wraps every library error into
`adapter.domain.errors` here, at the edge.
"""

from adapter.metrics.collector import PrometheusCollector, VectorSample, assemble, digest, join, parse_vector
from adapter.metrics.epp import EndpointFailure, EppScrape, EppScraper, apply_epp_queues, parse_queues
from adapter.metrics.queries import (
    ALL_QUERIES,
    ESSENTIAL_QUERIES,
    Query,
    QueryName,
    QueryWindows,
    build_queries,
)

__all__ = [
    "ALL_QUERIES",
    "ESSENTIAL_QUERIES",
    "EndpointFailure",
    "EppScrape",
    "EppScraper",
    "PrometheusCollector",
    "Query",
    "QueryName",
    "QueryWindows",
    "VectorSample",
    "apply_epp_queues",
    "assemble",
    "build_queries",
    "digest",
    "join",
    "parse_queues",
    "parse_vector",
]
