"""MCP: one scope of a memos store served to any MCP client (stdio today)."""

__all__: list[str] = []
