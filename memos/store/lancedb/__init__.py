"""The LanceDB store: tables, the shared search index, compaction, purge, the turn journal."""

__all__: list[str] = []
