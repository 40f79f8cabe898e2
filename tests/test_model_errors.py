"""A model that cannot be used is one line that says what to do: the provider's client is not
installed (name the extra), or its server is down (name the URL and the setting that chose it)."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import threading

import pydantic_ai.models
import pytest
from typer.testing import CliRunner

from memos.bench.serve import free_port
from memos.cli import app

runner = CliRunner()

WITHOUT_OPENAI = """
import json, sys
sys.modules["openai"] = None  # as if only memos-memory[local] were installed
from typer.testing import CliRunner
from memos.cli import app
runs = [CliRunner().invoke(app, ["chat", *options, "--db", sys.argv[1], "-m", "hi"]) for options in json.loads(sys.argv[2])]
print(json.dumps([[r.exit_code, r.output] for r in runs]))
"""
NEEDS_OPENAI = [["--model", "openai:gpt-4o-mini"], ["--model", "ollama:llama3.2"], ["--model", "llama3.2", "--base-url", "http://127.0.0.1:9/v1"]]


def test_a_provider_whose_client_is_not_installed_is_one_line_naming_the_extra(tmp_path):
    run = subprocess.run([sys.executable, "-c", WITHOUT_OPENAI, str(tmp_path / "db"), json.dumps(NEEDS_OPENAI)],
                         capture_output=True, text=True, timeout=300,
                         env={"OPENAI_API_KEY": "x", "OLLAMA_BASE_URL": "http://127.0.0.1:9/v1", "PATH": "/usr/bin:/bin", "COLUMNS": "300"})
    assert run.returncode == 0, run.stderr
    for options, (code, output) in zip(NEEDS_OPENAI, json.loads(run.stdout), strict=True):
        lines = output.strip().splitlines()
        assert code == 2 and len(lines) == 1 and "Traceback" not in output, (options, output)
        assert "pip install 'memos-memory[openai]'" in lines[0] and "openai" in lines[0], (options, lines)
    assert not (tmp_path / "db").exists()  # said before a store is opened


class Refuser:
    """A loopback port that accepts each connection and closes it at once (a server that is not
    answering), counting the tries."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}/v1"
        self.tries = 0
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.tries += 1
            conn.close()


@pytest.fixture
def cli(monkeypatch, embedder, tmp_path):
    monkeypatch.setattr("memos.embeddings._local", embedder)
    monkeypatch.setattr(pydantic_ai.models, "ALLOW_MODEL_REQUESTS", True)  # loopback only
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("COLUMNS", "300")
    monkeypatch.setenv("OPENAI_API_KEY", "local")
    for name in ("OPENAI_BASE_URL", "OLLAMA_BASE_URL", "MEMOS_BASE_URL"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("MEMOS_MODEL_RETRIES", "0")
    return monkeypatch


def chat(tmp_path, *options: str):
    return runner.invoke(app, ["chat", *options, "--db", str(tmp_path / "db"), "-m", "hi"])


def test_a_model_server_that_is_down_is_named_with_the_setting_that_chose_it(cli, tmp_path):
    down = f"http://127.0.0.1:{free_port()}/v1"  # nothing listens there
    cli.setenv("OPENAI_BASE_URL", down)
    out = chat(tmp_path, "--model", "openai-chat:llama3.2")
    assert out.exit_code == 2, out.output
    assert len(out.output.strip().splitlines()) == 1 and "Traceback" not in out.output
    assert f"cannot reach the model server at {down} (chosen by OPENAI_BASE_URL)" in out.output


def test_each_way_of_naming_a_model_server_is_the_setting_an_error_names(cli):
    from memos.cli._model import choose_model

    url = "http://127.0.0.1:9/v1"
    cli.setenv("OLLAMA_BASE_URL", url)
    assert (choose_model("ollama:llama3.2").url, choose_model("ollama:llama3.2").setting) == (url, "OLLAMA_BASE_URL")
    assert (choose_model("llama3.2", url).url, choose_model("llama3.2", url).setting) == (url, "--base-url")
    cli.setenv("MEMOS_BASE_URL", url)  # what typer hands on as --base-url when the flag is not given
    assert choose_model("llama3.2", url).setting == "MEMOS_BASE_URL"
    default = choose_model("openai-chat:gpt-4o-mini")
    assert default.url == "https://api.openai.com/v1/" and "set OPENAI_BASE_URL" in default.setting


def test_how_often_a_model_server_is_tried_is_a_setting(cli, tmp_path):
    server = Refuser()
    for retries, tries in (("0", 1), ("1", 2)):
        cli.setenv("MEMOS_MODEL_RETRIES", retries)
        server.tries = 0
        out = chat(tmp_path, "--model", "llama3.2", "--base-url", server.url)
        assert out.exit_code == 2 and f"cannot reach the model server at {server.url}" in out.output, out.output
        assert server.tries == tries
    cli.setenv("MEMOS_MODEL_RETRIES", "many")
    out = chat(tmp_path, "--model", "llama3.2", "--base-url", server.url)
    assert out.exit_code == 2 and "MEMOS_MODEL_RETRIES must be a number" in out.output, out.output
