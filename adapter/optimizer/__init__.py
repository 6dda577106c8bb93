"""Optimizers: turn a model's capacity signals into replica targets across its variants. Pure."""
