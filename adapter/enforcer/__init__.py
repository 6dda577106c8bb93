"""Enforcer: post-optimization policy (scale-to-zero, minimum one replica, retention, bounds, fallback)."""
