"""Analyzers: pure functions from per-pod metrics (plus typed state and config) to capacity signals."""
