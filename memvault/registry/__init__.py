"""Loaded tokens: each token's state and locks, the registry, and outside changes reaching the index."""
