"""Every example runs offline with a small step count (in-process, sharing the loaded embedder)."""

from __future__ import annotations

import runpy
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
RUNS = {
    "quickstart.py": ["--path", "{tmp}/q"],
    "custom_memory_type.py": ["--path", "{tmp}/c"],
    "mount_on_your_agent.py": ["--path", "{tmp}/m"],
    "local_model_server.py": ["--path", "{tmp}/l"],
    "autonomous_agent.py": ["--steps", "6", "--db", "{tmp}/a"],
    "scheduled_reflection.py": ["--steps", "12", "--db", "{tmp}/s"],
}


def test_every_example_is_listed():
    assert {p.name for p in EXAMPLES.glob("*.py")} == set(RUNS)


@pytest.mark.parametrize("name", sorted(RUNS))
def test_example_runs_offline(name, tmp_path, embedder, monkeypatch, capsys):
    monkeypatch.setattr("memos.embeddings._local", embedder)
    monkeypatch.setattr(sys, "argv", [name, *(a.format(tmp=tmp_path) for a in RUNS[name])])
    runpy.run_path(str(EXAMPLES / name), run_name="__main__")
    out = capsys.readouterr().out
    assert out.strip()
    if name == "autonomous_agent.py":
        assert "'steps': 6" in out and "'saved': 6" in out and "'insights': " in out and "'insights': 0" not in out
    if name == "mount_on_your_agent.py":
        assert "07:40" in out and "Alice prefers window seats" in out
    if name == "quickstart.py":
        assert "allergic to peanuts" in out
