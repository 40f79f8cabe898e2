"""The working context: core memory, one step's budgeted prompt, paging, and the session."""

__all__: list[str] = []
