"""The jinja2 templates memos renders into prompts, shipped in the wheel.

Every prompt is a `*.j2` file in this package, rendered with `StrictUndefined` (a variable
the code forgot to pass is an error, not an empty string). Dates and other per-call values
are template variables, never baked in at import. To override a template, put a file of the
same name in a directory and point `MEMOS_PROMPTS_DIR` at it (or call `set_override_dir`).
"""

from __future__ import annotations

import os
from functools import lru_cache
from pathlib import Path
from typing import Any

import jinja2

__all__ = ["TEMPLATE_DIR", "environment", "render", "set_override_dir", "template_names"]

TEMPLATE_DIR = Path(__file__).resolve().parent
"""Where the shipped templates are."""


@lru_cache(maxsize=4)
def _environment(override: str | None) -> jinja2.Environment:
    paths = [override, str(TEMPLATE_DIR)] if override else [str(TEMPLATE_DIR)]
    return jinja2.Environment(
        loader=jinja2.FileSystemLoader(paths),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=False,
        trim_blocks=True,
        lstrip_blocks=True,
        autoescape=False,  # prompts are plain text for a model, not HTML
    )


def environment() -> jinja2.Environment:
    """The jinja2 environment (user override directory first, then the shipped templates)."""
    return _environment(os.environ.get("MEMOS_PROMPTS_DIR") or None)


def set_override_dir(path: str | os.PathLike[str] | None) -> None:
    """Look for templates in `path` before the shipped ones (None: shipped only)."""
    if path is None:
        os.environ.pop("MEMOS_PROMPTS_DIR", None)
    else:
        os.environ["MEMOS_PROMPTS_DIR"] = str(path)


def render(name: str, **values: Any) -> str:
    """Render the template `name` (e.g. "context.j2") with `values`; a missing variable raises."""
    return environment().get_template(name).render(**values).strip()


def template_names() -> list[str]:
    """The names of the shipped templates."""
    return sorted(p.name for p in TEMPLATE_DIR.glob("*.j2"))
