"""The entity graph: entities, relations over time, and extraction without a model."""

__all__: list[str] = []
