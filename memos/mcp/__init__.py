"""MCP: one scope of a memos store served to any MCP client."""

__all__: list[str] = []
