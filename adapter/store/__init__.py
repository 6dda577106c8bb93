"""The decision store: the latest decision per VA, versioned and timestamped; the servers' only input."""

from adapter.store.decisions import DecisionReader, DecisionStore, StoredDecision

__all__ = ["DecisionReader", "DecisionStore", "StoredDecision"]
