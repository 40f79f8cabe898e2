"""Vault: sensitive items whose secret is encrypted at rest and never shown in clear."""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import Field

from .base import MemoryRecord

__all__ = ["VaultItem"]


class VaultItem(MemoryRecord):
    """A credential, address, ID number or other sensitive item.

    Only `caption` is embedded, indexed and rendered. `secret` is encrypted by the kernel
    before it is stored and is decrypted only by an approved reveal.
    """

    memory_type: ClassVar[str] = "vault"
    description: ClassVar[str] = "Sensitive items (credentials, addresses, IDs); only captions are ever shown."
    secret_fields: ClassVar[tuple[str, ...]] = ("secret",)
    model_writable: ClassVar[bool] = False  # written through vault_store, which checks the caption

    entry_type: Literal["credential", "address", "id_number", "payment", "contact", "other"] = "other"
    caption: str = Field(min_length=1, max_length=512, description="A non-sensitive description of the item.")
    sensitivity: Literal["low", "medium", "high"] = Field(default="high", description="Who may see it.")
    secret: str = Field(default="", repr=False, description="The sensitive value (ciphertext once stored).")

    def index_text(self) -> str:
        return f"{self.entry_type}: {self.caption}"

    def render(self) -> str:
        return f"[vault:{self.entry_type}, {self.sensitivity}] {self.caption} (secret hidden)"
