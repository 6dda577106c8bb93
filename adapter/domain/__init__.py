"""Domain vocabulary: ids, the frozen snapshot the engine reads, decisions, errors.

Only the standard library (and numpy where arrays help) is used here: no pydantic, no asyncio, no I/O.
"""
