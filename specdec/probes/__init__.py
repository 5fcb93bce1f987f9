"""Measurements an engine author reruns on their own model: eviction, lookahead, gates, basis, read path."""
