"""Every ```python block of the README runs as pasted: each alone, in a fresh namespace, in an
empty directory, offline.

A block whose first lines carry the marker `# needs a model` (shown in the README) runs with
every pydantic-ai model name resolved to an offline stand-in (a `FunctionModel` that answers
text, or an empty plan where structured output is asked for); any other block must run
without a model at all (`ALLOW_MODEL_REQUESTS` stays off). New README sections are picked up
without touching this file.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pydantic_ai.models
import pytest
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

README = Path(__file__).resolve().parent.parent / "README.md"
MARKER = "# needs a model"
BLOCKS = re.findall(r"^```python\n(.*?)^```", README.read_text(encoding="utf-8"), flags=re.S | re.M)


def _heading(code: str) -> str:
    """The README heading above a block: the test's id."""
    text = README.read_text(encoding="utf-8")
    before = text[: text.index(code)]
    heading = [line for line in before.splitlines() if line.startswith("#")][-1]
    return heading.lstrip("# ").strip()[:40]


def _stand_in(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    if info.output_tools and not info.allow_text_output:
        return ModelResponse(parts=[ToolCallPart(info.output_tools[0].name, {"actions": []})])
    return ModelResponse(parts=[TextPart("(offline stand-in for the model)")])


def test_the_readme_has_python_blocks():
    assert len(BLOCKS) >= 4


@pytest.mark.parametrize("code", BLOCKS, ids=[_heading(b) for b in BLOCKS])
def test_readme_block_runs_as_pasted(code, tmp_path, monkeypatch, embedder, capsys):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HOME", str(tmp_path))  # the vault key file lands here
    monkeypatch.setattr("memos.embeddings._local", embedder)
    if MARKER in "\n".join(code.splitlines()[:3]):
        def infer_model(model: Any, *args: Any, **kwargs: Any) -> Any:
            return model if isinstance(model, pydantic_ai.models.Model) else FunctionModel(_stand_in)

        monkeypatch.setattr(pydantic_ai.models, "infer_model", infer_model)
    namespace: dict[str, Any] = {"__name__": "__main__"}
    exec(compile(code, f"README.md block ({_heading(code)})", "exec"), namespace)  # noqa: S102
    assert capsys.readouterr().out.strip(), "a README example should show something"
