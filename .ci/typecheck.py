"""mypy over memos' packages as the wheel installs them (`.ci/run` calls it).

The repository keeps the card's top-level folders (agents/, memtypes/, prompts/) and the wheel
installs them as memos.agents, memos.memtypes, memos.prompts (`[tool.setuptools.package-dir]`).
mypy names a module after its folder and cannot follow setuptools' editable-install finder, so
`import memos.memtypes` would not resolve to memtypes/. This runs mypy's own command line with
each checked file named as installed; every file is checked once, at its real path.
Arguments are mypy's; none: the `files` of `[tool.mypy]` in pyproject.toml.
"""

from __future__ import annotations

import sys
import time
import tomllib
from pathlib import Path

from mypy.fscache import FileSystemCache
from mypy.main import process_options, run_build
from mypy.util import count_stats

ROOT = Path(__file__).resolve().parent.parent
PACKAGE_DIRS: dict[str, str] = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-dir"]
"""Installed package -> folder, e.g. "memos.agents" -> "agents"."""


def installed_name(module: str) -> str:
    """The name a module of the repository has once installed: agents.chat -> memos.agents.chat."""
    for package, folder in PACKAGE_DIRS.items():
        if package != folder and (module == folder or module.startswith(f"{folder}.")):
            return package + module[len(folder):]
    return module


def main(args: list[str]) -> int:
    """mypy's command line on `args`, the files named as installed; its exit status."""
    fscache = FileSystemCache()
    sources, options = process_options(args, fscache=fscache)
    for source in sources:
        source.module = installed_name(source.module)
    _, messages, blockers = run_build(sources, options, fscache, time.time(), sys.stdout, sys.stderr)
    errors, notes, files = count_stats(messages)
    if errors:
        print(f"Found {errors} error{'s' * (errors != 1)} in {files} file{'s' * (files != 1)} "
              f"(checked {len(sources)} source files)")
        return 2 if blockers else 1
    print(f"Success: no issues found in {len(sources)} source files")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
