"""A custom memory type: a `Recipe` store beside the six built-in ones.

Run it offline:  python examples/custom_memory_type.py [--path DIR]

A memory type is a pydantic model that subclasses `MemoryRecord`, names its store with
`memory_type`, and says what text to index (`index_text`) and how it reads in a prompt
(`render`). Register it when opening the memory; it gets its own LanceDB table, hybrid
search, CRUD, history and scopes exactly like the built-in types.
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
from typing import ClassVar

from pydantic import Field

from memos import MemoryOS, Scope
from memos.memtypes import MemoryRecord


class Recipe(MemoryRecord):
    """A dish the user cooks, with its ingredients."""

    memory_type: ClassVar[str] = "recipe"
    description: ClassVar[str] = "Dishes the user cooks: title, ingredients, notes."

    title: str = Field(min_length=1, max_length=200)
    ingredients: list[str] = Field(default_factory=list)
    notes: str = ""

    def index_text(self) -> str:  # what is embedded and full-text indexed
        return f"{self.title}: {', '.join(self.ingredients)}. {self.notes}".strip()

    def render(self) -> str:  # how it reads in a prompt
        return f"Recipe {self.title} ({', '.join(self.ingredients)})"


async def main(path: str) -> list[str]:
    memory = await MemoryOS.open(path, types=[Recipe])
    me = Scope("sam")
    soup, _ = await memory.add(me, [
        Recipe(title="Pumpkin soup", ingredients=["pumpkin", "ginger", "coconut milk"], importance=0.8),
        Recipe(title="Shakshuka", ingredients=["eggs", "tomatoes", "cumin"]),
    ])
    await memory.update(me, "recipe", soup.id, {"notes": "Roast the pumpkin first."})
    hits = await memory.search("something warm with ginger for a cold evening", me, types=["recipe"], k=2)
    for hit in hits:
        print(f"{hit.memory_type:8} {hit.score:.3f}  {hit.record.render()}")
    print("history of the soup:", [e.op for e in await memory.history(me, soup.id)])
    return [h.record.title for h in hits]  # type: ignore[attr-defined]


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--path", default=None, help="store directory (default: a temp dir)")
    args = parser.parse_args()
    asyncio.run(main(args.path or tempfile.mkdtemp(prefix="memos-recipes-")))
