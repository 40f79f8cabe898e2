"""Core memory: labelled blocks always rendered into the prompt (MemGPT's in-context memory)."""

from __future__ import annotations

from typing import ClassVar

from pydantic import Field

from .base import MemoryRecord

__all__ = ["CoreBlock"]


class CoreBlock(MemoryRecord):
    """A labelled block of always-present memory (persona, human, ...) with a size limit."""

    memory_type: ClassVar[str] = "core"
    description: ClassVar[str] = "Always-in-context blocks about the agent's persona and the human."
    always_in_prompt: ClassVar[bool] = True
    searched_by_default: ClassVar[bool] = False  # already in every prompt
    model_writable: ClassVar[bool] = False  # edited through the core-memory tools, with their limits

    label: str = Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_\-]+$", description="Block name, e.g. 'human'.")
    block_description: str = Field(default="", description="What belongs in this block, for the agent.")
    value: str = Field(default="", description="The block's content.")
    limit: int = Field(default=2000, ge=1, le=100_000, description="Maximum characters of value.")
    read_only: bool = Field(default=False, description="The agent may not edit this block.")

    def model_post_init(self, context: object) -> None:
        if len(self.value) > self.limit:
            raise ValueError(f"block {self.label!r} value is {len(self.value)} chars; its limit is {self.limit}")

    def index_text(self) -> str:
        return f"{self.label}: {self.value}"

    def render(self) -> str:
        return self.value
