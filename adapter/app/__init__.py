"""Composition roots: `demo` (simulated fleet, real servers) and, later, `serve` (in-cluster)."""
