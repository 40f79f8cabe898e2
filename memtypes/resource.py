"""Resource memory: documents, files, links and images, stored as chunks."""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import Field

from .base import MemoryRecord

__all__ = ["Resource", "ResourceType"]

ResourceType = Literal["document", "file", "link", "image", "other"]
"""What kind of thing a resource is."""


class Resource(MemoryRecord):
    """One chunk of a document, file, link or image description."""

    memory_type: ClassVar[str] = "resource"
    description: ClassVar[str] = "Documents, files, links and images the user shared, chunked."
    consolidate: ClassVar[bool] = True  # identical chunks only: two chunks alike may both matter
    decays: ClassVar[bool] = True

    title: str = Field(min_length=1, max_length=512, description="Document title or file name.")
    resource_type: ResourceType = Field(default="document")
    uri: str = Field(default="", max_length=2048, description="Where the resource lives.")
    summary: str = Field(default="", description="What the resource is about.")
    content: str = Field(default="", description="This chunk's text.")
    chunk_index: int = Field(default=0, ge=0, description="Position of the chunk in the resource.")

    def index_text(self) -> str:
        return f"{self.title}: {self.summary} {self.content}".strip()

    def render(self) -> str:
        body = self.content or self.summary
        return f"[{self.resource_type}] {self.title}: {body}"
