"""A loopback stand-in for a local OpenAI-compatible model server (Ollama, vLLM, llama.cpp).

It speaks `POST /v1/chat/completions` (no streaming) and `POST /v1/embeddings`, and answers
anything else with 404, as those servers do for `/v1/responses`. Embeddings are a text's
`stub_vector` (so a test can tell whose vector came back); the server can answer them after
`latency_s`, refuse every `reject_every`-th request with 429 and `Retry-After` (rate limiting),
or refuse all with 503 once `fail_after` requests were answered; it counts requests in flight. A request that offers an output tool (pydantic-ai's
structured output, e.g. the memory manager's plan) gets a call of it with `{"actions": []}`;
any other request gets a short text reply. Every request body is kept in `requests`.

Run it as a script (`python tests/openai_stub.py`) to print its base URL and serve until killed:
the CLI tests start it in a subprocess-free thread instead (`serve_stub()`).
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

REPLY = "Noted, Sam: bees it is."
STUB_DIM = 8


def stub_vector(text: str) -> list[float]:
    """The stub's embedding of `text`: 8 numbers from its hash."""
    digest = hashlib.sha256(text.encode()).digest()
    return [b / 255 for b in digest[:STUB_DIM]]


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
        if self.path.rstrip("/") == "/v1/embeddings":
            self._embeddings(body)
            return
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

    def _embeddings(self, body: dict[str, Any]) -> None:
        server = self.server
        with server.lock:
            server.calls += 1
            call = server.calls
            server.in_flight += 1
            server.max_in_flight = max(server.max_in_flight, server.in_flight)
        try:
            time.sleep(server.latency_s)
            if server.fail_after is not None and call > server.fail_after:
                self._send(503, {"error": {"message": "overloaded", "type": "server_error"}})
                return
            if server.reject_every and call % server.reject_every == 0:
                server.rejected += 1
                data = json.dumps({"error": {"message": "rate limited", "type": "rate_limit"}}).encode()
                self.send_response(429)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.send_header("Retry-After", "1")
                if server.retry_after_ms is not None:
                    self.send_header("retry-after-ms", str(server.retry_after_ms))
                self.end_headers()
                self.wfile.write(data)
                return
            inputs = body.get("input") or []
            inputs = [inputs] if isinstance(inputs, str) else inputs
            server.batch_sizes.append(len(inputs))
            self._send(200, {"object": "list", "model": body.get("model", "stub"), "usage": {"prompt_tokens": 1, "total_tokens": 1},
                             "data": [{"object": "embedding", "index": i, "embedding": stub_vector(t)} for i, t in enumerate(inputs)]})
        finally:
            with server.lock:
                server.in_flight -= 1

    def do_GET(self) -> None:  # noqa: N802
        self._send(404, {"error": {"message": f"404 page not found: {self.path}"}})


class _StubServer(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 64
    requests: list[dict[str, Any]]

    def setup_embeddings(self, *, latency_s: float = 0.0, reject_every: int = 0, retry_after_ms: int | None = None,
                         fail_after: int | None = None) -> None:
        """How `/v1/embeddings` behaves (see the module docstring); resets its counters."""
        self.lock = threading.Lock()
        self.latency_s, self.reject_every, self.retry_after_ms, self.fail_after = latency_s, reject_every, retry_after_ms, fail_after
        self.calls = self.in_flight = self.max_in_flight = self.rejected = 0
        self.batch_sizes: list[int] = []


@contextmanager
def serve_stub() -> Iterator[_StubServer]:
    """Serve the stub on 127.0.0.1 (a free port) in a thread; yields the server (`.url`, `.requests`)."""
    server = _StubServer(("127.0.0.1", 0), _Handler)
    server.requests = []
    server.setup_embeddings()
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
