"""Retrieval: hybrid search across the typed stores, ranking, and packing into a token budget."""

__all__: list[str] = []
