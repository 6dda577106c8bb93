"""The metrics edge: PromQL builders (`queries`), the Prometheus collector (`collector`), the answers' reading
(`answers`) and direct EPP scraping (`epp`).

The only package that imports `prometheus_api_client` (import-linter contract). It turns what Prometheus and
the EPP pods say into `adapter.domain.cluster.Collection` values and wraps every library error into
`adapter.domain.errors` here, at the edge. Nothing is re-exported here: each module is imported by its name.
"""
