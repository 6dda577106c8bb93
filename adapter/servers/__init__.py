"""The serving edge: External Metrics API (aiohttp), KEDA external scaler (grpc.aio), own /metrics and health.

Servers read the DecisionStore only (through `adapter.store.DecisionReader`); they never import the engine,
analyzers, the Kubernetes client or the metrics collector (import-linter enforces it).
"""
