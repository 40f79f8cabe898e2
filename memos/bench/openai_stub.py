"""A loopback stand-in for an OpenAI-compatible model server (Ollama, vLLM, llama.cpp, a hosted API).

It speaks `POST /v1/chat/completions` (no streaming) and `POST /v1/embeddings`, answers
`GET /stats` with its counters, and anything else with 404, as those servers do for
`/v1/responses`. Embeddings are a text's `stub_vector` (so a caller can tell whose vector came
back); the server can answer them after `latency_s`, refuse a fraction `reject_rate` of requests
(or every `reject_every`-th) with 429 and `Retry-After` (rate limiting), or refuse all with 503
once `fail_after` requests were answered; it counts requests in flight. A chat request that
offers an output tool (pydantic-ai's structured output, e.g. the memory manager's plan) gets a
call of it with `{"actions": []}`; any other gets a short text reply. Every request body is kept
in `requests` (`keep_requests=False`: not kept, for benchmarks). Connections are kept alive
(HTTP/1.1), and a request for `encoding_format: "base64"` (the openai client's default) gets
little-endian float32s in base64, as OpenAI, vLLM and llama.cpp answer it (`base64=False`: floats
anyway, as a server that ignores the field does).

`serve_stub()` serves it in a thread of this process (tests); `python -m memos.bench.openai_stub
[--latency-ms 20 --rate-429 0.1 ...]` prints its base URL and serves until killed (`memos bench
embedder --remote-stub` runs it so, in a process of its own).
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import json
import math
import struct
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

__all__ = ["REPLY", "STUB_DIM", "main", "serve_stub", "stub_vector"]

REPLY = "Noted, Sam: bees it is."
STUB_DIM = 8


def stub_vector(text: str, dim: int = STUB_DIM) -> list[float]:
    """The stub's embedding of `text`: `dim` numbers in [0, 1] from its hash."""
    data = text.encode()
    digest = hashlib.sha256(data).digest() if dim <= 32 else hashlib.shake_256(data).digest(dim)
    return [b / 255 for b in digest[:dim]]


class _Handler(BaseHTTPRequestHandler):
    server: _StubServer
    protocol_version = "HTTP/1.1"  # keep-alive: a client reuses its connections
    disable_nagle_algorithm = True  # a reply in two writes (head, body) is not held back for an ACK

    def log_message(self, *args: Any) -> None:  # quiet
        pass

    def _send(self, status: int, body: dict[str, Any], headers: Sequence[tuple[str, str]] = ()) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for name, value in headers:
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(data)

    def do_POST(self) -> None:  # noqa: N802
        length = int(self.headers.get("Content-Length") or 0)
        body = json.loads(self.rfile.read(length) or b"{}")
        if self.server.keep_requests:
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
            if server.rejects(call):
                with server.lock:
                    server.rejected += 1
                headers = [("Retry-After", f"{server.retry_after_s:g}")]
                if server.retry_after_ms is not None:
                    headers.append(("retry-after-ms", str(server.retry_after_ms)))
                self._send(429, {"error": {"message": "rate limited", "type": "rate_limit"}}, headers)
                return
            inputs = body.get("input") or []
            inputs = [inputs] if isinstance(inputs, str) else inputs
            with server.lock:
                server.batch_sizes.append(len(inputs))
            vectors: list[Any] = [stub_vector(t, server.dim) for t in inputs]
            if server.base64 and body.get("encoding_format") == "base64":
                vectors = [base64.b64encode(struct.pack(f"<{len(v)}f", *v)).decode() for v in vectors]
            self._send(200, {"object": "list", "model": body.get("model", "stub"), "usage": {"prompt_tokens": 1, "total_tokens": 1},
                             "data": [{"object": "embedding", "index": i, "embedding": v} for i, v in enumerate(vectors)]})
        finally:
            with server.lock:
                server.in_flight -= 1

    def do_GET(self) -> None:  # noqa: N802
        if self.path.rstrip("/") == "/stats":
            self._send(200, self.server.stats())
            return
        self._send(404, {"error": {"message": f"404 page not found: {self.path}"}})


class _StubServer(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 128
    requests: list[dict[str, Any]]
    keep_requests = True
    url: str

    def setup_embeddings(self, *, latency_s: float = 0.0, reject_every: int = 0, reject_rate: float = 0.0,
                         retry_after_s: float = 1.0, retry_after_ms: int | None = None, fail_after: int | None = None,
                         dim: int = STUB_DIM, base64: bool = True) -> None:
        """How `/v1/embeddings` behaves (see the module docstring); resets its counters."""
        self.lock = threading.Lock()
        self.latency_s, self.fail_after, self.dim, self.base64 = latency_s, fail_after, dim, base64
        self.reject_rate = 1 / reject_every if reject_every else reject_rate
        self.retry_after_s, self.retry_after_ms = retry_after_s, retry_after_ms
        self.calls = self.in_flight = self.max_in_flight = self.rejected = 0
        self.batch_sizes: list[int] = []

    def rejects(self, call: int) -> bool:
        """Whether the `call`-th request is refused: `reject_rate` of them, evenly spread
        (rate 1/k refuses every k-th)."""
        rate = self.reject_rate
        return rate > 0 and math.floor(call * rate + 1e-9) > math.floor((call - 1) * rate + 1e-9)

    def stats(self) -> dict[str, Any]:
        """The embeddings counters: requests, 429s, most in flight, texts embedded; the CPU seconds the stub's process used."""
        with self.lock:
            return {"requests": self.calls, "rejected": self.rejected, "max_in_flight": self.max_in_flight,
                    "answered": len(self.batch_sizes), "texts": sum(self.batch_sizes), "cpu_s": time.process_time()}


@contextmanager
def serve_stub(host: str = "127.0.0.1", port: int = 0) -> Iterator[_StubServer]:
    """Serve the stub on `host` (a free port by default) in a thread; yields the server (`.url`, `.requests`)."""
    server = _StubServer((host, port), _Handler)
    server.requests = []
    server.setup_embeddings()
    server.url = f"http://{host}:{server.server_address[1]}/v1"
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


def main(argv: Sequence[str] | None = None) -> None:
    """Serve the stub on 127.0.0.1 until killed; the first line printed is its base URL."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--latency-ms", type=float, default=0.0, help="Each embeddings request is answered after this long.")
    parser.add_argument("--rate-429", type=float, default=0.0, help="The fraction of requests refused with 429.")
    parser.add_argument("--retry-after", type=float, default=1.0, help="The 429's Retry-After, in seconds.")
    parser.add_argument("--retry-after-ms", type=int, help="Also send retry-after-ms (OpenAI's header; it wins).")
    parser.add_argument("--dim", type=int, default=STUB_DIM, help="The vectors' dimension.")
    parser.add_argument("--floats-only", action="store_true", help="Ignore encoding_format: base64 (floats always).")
    args = parser.parse_args(argv)
    with serve_stub(port=args.port) as stub:
        stub.keep_requests = False
        stub.setup_embeddings(latency_s=args.latency_ms / 1000, reject_rate=args.rate_429, retry_after_s=args.retry_after,
                              retry_after_ms=args.retry_after_ms, dim=args.dim, base64=not args.floats_only)
        print(stub.url, flush=True)
        threading.Event().wait()


if __name__ == "__main__":
    main()
