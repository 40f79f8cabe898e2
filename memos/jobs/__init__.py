"""Background jobs: the scheduler, reflection, consolidation, decay and the audit repair."""

__all__: list[str] = []
