"""The house's structure, checked from the source with `ast` (nothing is imported or run).

1. Dependencies point one way. Every module sits on a floor and may import only from its own
   floor or below. Every import counts: module-level, lazy (inside a function) and
   `TYPE_CHECKING` ones. The floors are the ones docs/concepts.md's "Floors" section states:

   | floor | modules |
   |---|---|
   | 0 types and prompts | `memos.memtypes`, `memos.prompts` |
   | 1 kernel | every other `memos.*` module (`memos/`: storage, retrieval, facade, session, jobs, ...) |
   | 2 agents | `memos.agents` (pydantic-ai: chat, manager, reflection, consolidation, tools) |
   | 3 faces | the package root `memos` (its `__init__` wires the agents in), `memos.cli`, `memos.mcp.server`, `memos.serve`, `memos.bench`, `examples/` |

   What the kernel needs from a model is a protocol in the kernel (`memos.context.paging.Summarizer`,
   `memos.model_backend`); the pydantic-ai implementations live in `memos.agents` and are passed
   in (`MemoryOS.open(..., backend=...)`) or named by the facade's default (`DEFAULT_BACKEND`, a
   module path resolved on first use): no import of the agents runs up from below them.

2. No module touches another module's underscore names: no `from x import _name` across
   modules, no `obj._name` on anything but `self` / `cls`. Private modules (`memos._sync`,
   `memos.store.lancedb._malloc`, `memos.bench._stats`, `memos.serve._routes_*`) are the documented exception:
   a module whose own name starts with `_` is private to the package; its public names may be
   imported, and its own package may import it (`from . import _routes_view`).
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = {"memos": ROOT / "memos", "memos.agents": ROOT / "agents", "memos.memtypes": ROOT / "memtypes",
            "memos.prompts": ROOT / "prompts"}

FLOORS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("types and prompts", ("memos.memtypes", "memos.prompts")),
    ("kernel", ("memos.*",)),
    ("agents", ("memos.agents",)),
    ("faces", ("memos", "memos.cli", "memos.mcp", "memos.serve", "memos.bench", "examples")),
)
"""(name, module prefixes), bottom first. `memos.*` is every memos module no other floor claims;
`memos` alone is the package root module (`memos/__init__.py`)."""


@dataclass(frozen=True)
class Module:
    name: str
    path: Path
    is_package: bool


def modules() -> list[Module]:
    found = []
    for package, folder in PACKAGES.items():
        for path in sorted(folder.rglob("*.py")):
            parts = list(path.relative_to(folder).with_suffix("").parts)
            is_package = parts[-1] == "__init__"
            if is_package:
                parts = parts[:-1]
            name = ".".join([package, *parts])
            if package == "memos" and any(name == p or name.startswith(p + ".") for p in PACKAGES if p != "memos"):
                continue
            found.append(Module(name, path, is_package))
    found += [Module(f"examples.{p.stem}", p, False) for p in sorted((ROOT / "examples").glob("*.py"))]
    return found


KNOWN = {m.name for m in modules()}


def floor_of(name: str) -> int:
    if name == "memos":
        return 3
    best, floor = -1, 1
    for index, (_, prefixes) in enumerate(FLOORS):
        for prefix in prefixes:
            if prefix != "memos.*" and prefix != "memos" and (name == prefix or name.startswith(prefix + ".")) and len(prefix) > best:
                best, floor = len(prefix), index
    return floor


def imports_of(module: Module) -> list[tuple[int, str]]:
    """(line, module) for every import of a memos or examples module, wherever it is in the file."""
    tree = ast.parse(module.path.read_text(), str(module.path))
    package = module.name if module.is_package else module.name.rpartition(".")[0]
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                target = ".".join([*base, node.module] if node.module else base)
            else:
                target = node.module or ""
            for alias in node.names:
                sub = f"{target}.{alias.name}"
                out.append((node.lineno, sub if sub in KNOWN else target))
    return [(line, name) for line, name in out if name.split(".")[0] in ("memos", "examples")]


def test_floor_names_cover_every_module():
    assert len(KNOWN) > 40
    assert floor_of("memos.memory") == 1 and floor_of("memos.agents.chat") == 2 and floor_of("memos.cli.main") == 3
    assert floor_of("memos.memtypes.base") == 0 and floor_of("memos") == 3 and floor_of("memos.mcp.server") == 3


def test_every_import_points_down_or_sideways():
    upward = []
    for module in modules():
        own = floor_of(module.name)
        for line, target in imports_of(module):
            if floor_of(target) > own:
                upward.append(f"{module.path.relative_to(ROOT)}:{line} ({FLOORS[own][0]}) imports {target} "
                              f"({FLOORS[floor_of(target)][0]})")
    assert not upward, "imports that go up a floor:\n" + "\n".join(upward)


def test_type_ignores_are_few_and_explained():
    """At most 5 `# type: ignore` in the packages, each narrowed to an error code and followed
    by its reason (`# type: ignore[code]  # why`)."""
    found, unexplained = [], []
    for module in modules():
        if module.name.startswith("examples"):
            continue
        for number, line in enumerate(module.path.read_text().splitlines(), 1):
            if "# type: ignore" in line:
                where = f"{module.path.relative_to(ROOT)}:{number}"
                found.append(where)
                rest = line.split("# type: ignore", 1)[1]
                if not rest.startswith("[") or "#" not in rest.split("]", 1)[-1]:
                    unexplained.append(where)
    assert len(found) <= 5, f"{len(found)} type: ignore comments: {found}"
    assert not unexplained, f"type: ignore without an error code and a reason: {unexplained}"


def test_readme_states_the_same_floors():
    readme = (ROOT / "docs" / "concepts.md").read_text()
    section = readme.split("### Floors", 1)[1].split("\n#", 1)[0]
    for index, (name, prefixes) in enumerate(FLOORS):
        row = next((line for line in section.splitlines() if line.startswith(f"| {index} {name} |")), None)
        assert row is not None, f"docs/concepts.md floors table lacks the row for floor {index} ({name})"
        for prefix in prefixes:
            shown = "every other `memos.*` module" if prefix == "memos.*" else f"`{prefix}`"
            assert shown in row, f"docs/concepts.md floor {index} does not name {shown}"


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


APSCHEDULER_EXTENSION_POINTS = {"_dispatch_event", "_process_jobs", "_jobstore_alias", "_get_run_times", "_modify"}
"""APScheduler 3's protected members that its own executor and scheduler subclasses are written
against (`memos.jobs.scheduler` subclasses them to judge misfires by an injected clock; the
dependency is pinned below 4). Not our modules' names: the rule is about ours."""


def _own_names(cls: ast.ClassDef) -> set[str]:
    """What a class defines: its methods and class attributes, and what its methods set on self."""
    names = {n.name for n in cls.body if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)}
    for node in ast.walk(cls):
        if isinstance(node, ast.Assign | ast.AnnAssign):
            for target in node.targets if isinstance(node, ast.Assign) else [node.target]:
                if isinstance(target, ast.Name):
                    names.add(target.id)
                elif isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name) and target.value.id in ("self", "cls"):
                    names.add(target.attr)
    return names


def _own_private_module(package: str, node: ast.ImportFrom, name: str) -> bool:
    """`from . import _routes` inside a package: a private module of that very package."""
    return node.level == 1 and not node.module and f"{package}.{name}" in KNOWN


def test_no_module_touches_another_modules_underscore_names():
    """`x._name` is allowed on self / cls, and inside a class on another instance of it (a
    classmethod finishing the object it built); `from m import _name` never."""
    found = []
    for module in modules():
        tree = ast.parse(module.path.read_text(), str(module.path))
        allowed_in: dict[int, set[str]] = {}
        for cls in (n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)):
            own = _own_names(cls)
            for node in ast.walk(cls):
                allowed_in.setdefault(id(node), set()).update(own)
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                package = module.name if module.is_package else module.name.rpartition(".")[0]
                for alias in node.names:
                    if _private(alias.name) and not _own_private_module(package, node, alias.name):
                        found.append(f"{module.path.relative_to(ROOT)}:{node.lineno} imports {alias.name}")
            elif isinstance(node, ast.Attribute) and _private(node.attr):
                owner = node.value
                if isinstance(owner, ast.Name) and owner.id in ("self", "cls"):
                    continue
                if node.attr in allowed_in.get(id(node), set()) or node.attr in APSCHEDULER_EXTENSION_POINTS:
                    continue
                found.append(f"{module.path.relative_to(ROOT)}:{node.lineno} reaches {ast.unparse(node)}")
    assert not found, "underscore names used across modules:\n" + "\n".join(found)


def _graph() -> dict[str, set[str]]:
    """module -> the memos modules it imports (every import: module-level, lazy, TYPE_CHECKING)."""
    return {m.name: {t for _, t in imports_of(m) if t in KNOWN and t != m.name} for m in modules()}


def test_no_import_circles():
    """No two modules import each other, directly or round a loop, TYPE_CHECKING imports included
    (Tarjan's strongly connected components over the import graph)."""
    graph, index, low, stack, on, circles = _graph(), {}, {}, [], set(), []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on.add(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                on.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                circles.append(sorted(component))

    for name in sorted(graph):
        if name not in index:
            visit(name)
    assert not circles, "import circles:\n" + "\n".join(" <-> ".join(c) for c in circles)


def test_the_kernel_never_imports_the_agents():
    """Agents import the kernel, never the reverse; only the package root and the faces reach them."""
    reaching = [f"{m.path.relative_to(ROOT)}:{line} imports {target}" for m in modules() if floor_of(m.name) < 2
                for line, target in imports_of(m) if target == "memos.agents" or target.startswith("memos.agents.")]
    assert not reaching, "kernel modules that import the agents:\n" + "\n".join(reaching)


def test_only_the_lancedb_store_imports_lancedb():
    """LanceDB stays behind the store protocol (`memos.store.protocol`): only `memos.store.lancedb` imports it."""
    found = []
    for module in modules():
        if module.name.startswith("memos.store.lancedb"):
            continue
        for node in ast.walk(ast.parse(module.path.read_text(), str(module.path))):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else (
                [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else [])
            found += [f"{module.path.relative_to(ROOT)}:{node.lineno} imports {n}" for n in names if n.split(".")[0] == "lancedb"]
    assert not found, "modules outside memos.store.lancedb that import lancedb:\n" + "\n".join(found)


CLASS_LINES_AT_MOST = 400


def test_no_class_in_the_kernel_is_over_400_lines():
    """A class past ~400 lines is two concepts (STYLE.md)."""
    large = []
    for module in modules():
        if not module.name.startswith("memos.") or module.name.startswith(("memos.agents", "memos.memtypes", "memos.prompts")):
            continue
        for node in ast.walk(ast.parse(module.path.read_text(), str(module.path))):
            if isinstance(node, ast.ClassDef) and node.end_lineno - node.lineno + 1 > CLASS_LINES_AT_MOST:
                large.append(f"{module.path.relative_to(ROOT)}:{node.lineno} {node.name}: {node.end_lineno - node.lineno + 1} lines")
    assert not large, "classes over 400 lines:\n" + "\n".join(large)
