"""A loopback stand-in for a local OpenAI-compatible model server (Ollama, vLLM, llama.cpp).

It speaks only `POST /v1/chat/completions` (no streaming) and answers anything else with 404,
as those servers do for `/v1/responses`. A request that offers an output tool (pydantic-ai's
structured output, e.g. the memory manager's plan) gets a call of it with `{"actions": []}`;
any other request gets a short text reply. Every request body is kept in `requests`.

Run it as a script (`python tests/openai_stub.py`) to print its base URL and serve until killed:
the CLI tests start it in a subprocess-free thread instead (`serve_stub()`).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

REPLY = "Noted, Sam: bees it is."


class _Handler(BaseHTTPRequestHandler):
    server: _StubServer

    def log_message(self, *args: Any) -> None:  # quiet
        pass

    def _send(self, status: int, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_POST(self) -> None:  # noqa: N802
        length = int(self.headers.get("Content-Length") or 0)
        body = json.loads(self.rfile.read(length) or b"{}")
        self.server.requests.append({"path": self.path, "body": body})
        if self.path.rstrip("/") != "/v1/chat/completions":
            self._send(404, {"error": {"message": f"404 page not found: {self.path}", "type": "not_found"}})
            return
        tools = [t["function"]["name"] for t in body.get("tools", []) if t.get("type") == "function"]
        output_tools = [name for name in tools if name.startswith("final_result")]
        if output_tools:
            message: dict[str, Any] = {"role": "assistant", "content": None, "tool_calls": [{
                "id": f"call_{len(self.server.requests)}", "type": "function",
                "function": {"name": output_tools[0], "arguments": json.dumps({"actions": []})}}]}
            finish = "tool_calls"
        else:
            message, finish = {"role": "assistant", "content": REPLY}, "stop"
        self._send(200, {
            "id": f"chatcmpl-{len(self.server.requests)}", "object": "chat.completion", "created": int(time.time()),
            "model": body.get("model", "stub"), "choices": [{"index": 0, "message": message, "finish_reason": finish}],
            "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
        })

    def do_GET(self) -> None:  # noqa: N802
        self._send(404, {"error": {"message": f"404 page not found: {self.path}"}})


class _StubServer(ThreadingHTTPServer):
    daemon_threads = True
    requests: list[dict[str, Any]]


@contextmanager
def serve_stub() -> Iterator[_StubServer]:
    """Serve the stub on 127.0.0.1 (a free port) in a thread; yields the server (`.url`, `.requests`)."""
    server = _StubServer(("127.0.0.1", 0), _Handler)
    server.requests = []
    server.url = f"http://127.0.0.1:{server.server_address[1]}/v1"  # type: ignore[attr-defined]
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


if __name__ == "__main__":
    with serve_stub() as stub:
        print(stub.url, flush=True)  # type: ignore[attr-defined]
        threading.Event().wait()
