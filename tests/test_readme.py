"""Every ```python block of the README and of every docs/*.md page runs as pasted: each alone,
in a fresh namespace, in an empty directory, offline; and the README stays a front door whose
relative links (and the docs pages' links) all lead somewhere.

A block whose first lines carry the marker `# needs a model` (shown in the page) runs with
every pydantic-ai model name resolved to an offline stand-in (a `FunctionModel` that answers
text, or an empty plan where structured output is asked for); any other block must run
without a model at all (`ALLOW_MODEL_REQUESTS` stays off). A snippet that is not meant to run
(shell commands, output, an illustration) takes another fence (```bash, ```text, or none).
New pages and sections are picked up without touching this file.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pydantic_ai.models
import pytest
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
PAGES = [README, *sorted((ROOT / "docs").glob("*.md"))]
MARKER = "# needs a model"
README_MAX_LINES = 350
FENCE = re.compile(r"^(```|~~~).*?^\1[ \t]*$", flags=re.S | re.M)


def _name(page: Path) -> str:
    return str(page.relative_to(ROOT))


def _blocks(page: Path) -> list[tuple[str, str]]:
    """(heading above it, code) for each ```python block of a page."""
    text = page.read_text(encoding="utf-8")
    out = []
    for match in re.finditer(r"^```python\n(.*?)^```", text, flags=re.S | re.M):
        before = FENCE.sub("", text[: match.start()])
        heading = [line for line in before.splitlines() if line.startswith("#")][-1]
        out.append((heading.lstrip("# ").strip()[:40], match.group(1)))
    return out


BLOCKS = [(page, heading, code) for page in PAGES for heading, code in _blocks(page)]


def _stand_in(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    if info.output_tools and not info.allow_text_output:
        return ModelResponse(parts=[ToolCallPart(info.output_tools[0].name, {"actions": []})])
    return ModelResponse(parts=[TextPart("(offline stand-in for the model)")])


def test_the_readme_and_docs_have_python_blocks():
    assert _blocks(README), "the README should show its 20-line example"
    assert len(BLOCKS) >= 4


@pytest.mark.parametrize(("page", "heading", "code"), BLOCKS, ids=[f"{_name(p)}: {h}" for p, h, _ in BLOCKS])
def test_docs_block_runs_as_pasted(page, heading, code, tmp_path, monkeypatch, embedder, capsys):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HOME", str(tmp_path))  # the vault key file lands here
    monkeypatch.setattr("memos.embeddings._local", embedder)
    if MARKER in "\n".join(code.splitlines()[:3]):
        def infer_model(model: Any, *args: Any, **kwargs: Any) -> Any:
            return model if isinstance(model, pydantic_ai.models.Model) else FunctionModel(_stand_in)

        monkeypatch.setattr(pydantic_ai.models, "infer_model", infer_model)
    namespace: dict[str, Any] = {"__name__": "__main__"}
    exec(compile(code, f"{_name(page)} block ({heading})", "exec"), namespace)  # noqa: S102
    assert capsys.readouterr().out.strip(), "a docs example should show something"


def test_the_readme_is_a_front_door():
    lines = README.read_text(encoding="utf-8").count("\n")
    assert lines <= README_MAX_LINES, f"README.md has {lines} lines; at most {README_MAX_LINES}: move detail into docs/"


def _anchors(page: Path) -> set[str]:
    """GitHub's ids for a page's headings: lower case, punctuation dropped, spaces to hyphens,
    a repeated id numbered."""
    seen: dict[str, int] = {}
    out = set()
    for line in FENCE.sub("", page.read_text(encoding="utf-8")).splitlines():
        if not re.match(r"#{1,6} ", line):
            continue
        slug = re.sub(r"[^\w\- ]", "", line.lstrip("#").strip().lower()).replace(" ", "-")
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        out.add(slug if count == 0 else f"{slug}-{count}")
    return out


def _links(page: Path) -> list[str]:
    """The targets of a page's markdown links and images, outside code."""
    text = re.sub(r"`[^`\n]*`", "", FENCE.sub("", page.read_text(encoding="utf-8")))
    return re.findall(r"\]\(([^)\s]+)\)", text)


@pytest.mark.parametrize("page", PAGES, ids=_name)
def test_every_relative_link_leads_somewhere(page):
    broken = []
    for target in _links(page):
        if re.match(r"[a-z][a-z0-9+.-]*:", target):  # https:, mailto:: not ours to check
            continue
        path, _, anchor = target.partition("#")
        file = (page.parent / path).resolve() if path else page
        if not file.exists():
            broken.append(f"{target}: no file {file.relative_to(ROOT) if file.is_relative_to(ROOT) else file}")
        elif anchor and file.suffix == ".md" and anchor not in _anchors(file):
            broken.append(f"{target}: no heading #{anchor} in {_name(file)}")
    assert not broken, f"{_name(page)} has broken links:\n" + "\n".join(broken)
