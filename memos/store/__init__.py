"""Storage: the protocol the kernel needs from a store, and its implementations."""

__all__: list[str] = []
