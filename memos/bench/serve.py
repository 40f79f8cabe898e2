"""`memos bench serve`: N concurrent HTTP clients writing and searching through `memos serve` on loopback.

One or several server processes (each spawned as a fresh `memos serve`, sharing nothing but
the store) run on a temp directory or on a loopback S3 server (moto). Each client has a user's
API key, writes facts and searches between writes. The run reports throughput, p50/p95 latency
per operation, and then reads every user's store back to check that each acknowledged write is
there exactly once (none lost, none duplicated). Counts and time are bounded.
"""

from __future__ import annotations

import asyncio
import os
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ._stats import percentiles

__all__ = ["ServerProcess", "free_port", "loopback_s3", "run_serve_bench"]

USERS = 4


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@dataclass
class ServerProcess:
    """A `memos serve` in its own process on a loopback port (started fresh: never forked from a process using LanceDB)."""

    db: str
    admin_key: str = field(default_factory=lambda: "admin-" + secrets.token_hex(16))
    embedder: str = "none"
    storage_options: dict[str, str] | None = None
    port: int = field(default_factory=free_port)
    model: str | None = None
    log: Path | None = None
    """Where the server's stderr goes (appended; None: a pipe, read if it fails to start)."""
    max_pending: int | None = None
    """`memos serve --max-pending` (None: its default)."""
    proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout: float = 120.0) -> ServerProcess:
        import httpx2

        command = [sys.executable, "-m", "memos.cli", "serve", "--db", self.db, "--port", str(self.port), "--embedder", self.embedder]
        for key, value in (self.storage_options or {}).items():
            command += ["--storage-option", f"{key}={value}"]
        if self.model:
            command += ["--model", self.model]
        if self.max_pending is not None:
            command += ["--max-pending", str(self.max_pending)]
        env = {**os.environ, "MEMOS_ADMIN_KEY": self.admin_key, "LANCE_LOG": "error", "HF_HUB_OFFLINE": "1"}
        if self.log is None:
            self.proc = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        else:  # a file, not a pipe: a pipe nobody reads would block a long run
            with self.log.open("ab") as err:
                self.proc = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=err)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                said = self.log.read_bytes() if self.log is not None else self.proc.stderr.read() if self.proc.stderr else b""
                raise RuntimeError(f"memos serve exited with {self.proc.returncode}: {said.decode(errors='replace')[-2000:]}")
            try:
                if httpx2.get(self.url + "/healthz", timeout=30).status_code == 200:
                    return self
            except httpx2.HTTPError:
                pass
            time.sleep(0.2)
        self.stop()
        raise RuntimeError(f"memos serve did not answer on {self.url} within {timeout:.0f}s")

    def make_key(self, user_id: str, **options: Any) -> str:
        import httpx2

        r = httpx2.post(self.url + "/admin/keys", json={"user_id": user_id, **options},
                        headers={"Authorization": f"Bearer {self.admin_key}"}, timeout=30)
        r.raise_for_status()
        return r.json()["token"]

    def kill(self) -> None:
        """SIGKILL the server (a crash: nothing in flight finishes) and reap it."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def __enter__(self) -> ServerProcess:
        return self.start() if self.proc is None else self

    def __exit__(self, *exc: object) -> None:
        self.stop()


class loopback_s3:  # noqa: N801 - a context manager used like a function
    """A moto S3 server in its own process on loopback, with one bucket; gives LanceDB storage options.

    Needs moto[server] and boto3 (the test extra). Its own process, so the S3 server's Python
    work does not share a GIL with the load-generating clients."""

    def __init__(self, bucket: str = "memos") -> None:
        self.bucket = bucket
        self.proc: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> dict[str, str]:
        import boto3
        import httpx2

        port = free_port()
        self.proc = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        endpoint = f"http://127.0.0.1:{port}"
        for _ in range(300):
            try:
                httpx2.get(endpoint, timeout=5)
                break
            except httpx2.HTTPError:
                time.sleep(0.1)
        boto3.client("s3", endpoint_url=endpoint, aws_access_key_id="test", aws_secret_access_key="test",
                     region_name="us-east-1").create_bucket(Bucket=self.bucket)
        return {"aws_endpoint": endpoint, "aws_access_key_id": "test", "aws_secret_access_key": "test",
                "aws_region": "us-east-1", "allow_http": "true"}

    def __exit__(self, *exc: object) -> None:
        if self.proc is not None:
            self.proc.terminate()
            self.proc.wait(timeout=20)


async def _client(index: int, url: str, token: str, writes: int, searches: int, lat: dict[str, list[float]],
                  acked: list[tuple[str, str, str]], errors: Counter[str]) -> None:
    import httpx2

    headers = {"Authorization": f"Bearer {token}"}
    async with httpx2.AsyncClient(base_url=url, headers=headers, timeout=120) as http:
        # writes and searches alternate while both last, the rest of the longer kind follows
        order = [op for pair in zip(["write"] * writes, ["search"] * searches) for op in pair]
        order += ["write"] * (writes - len(order) // 2) + ["search"] * (searches - len(order) // 2)
        for step, op in enumerate(order):
            start = time.perf_counter()
            try:
                if op == "write":
                    marker = uuid.uuid4().hex[:12]
                    r = await http.post("/v1/stores/semantic", json={"subject": f"client {index}", "tags": ["bench"],
                                                                     "summary": f"client {index} wrote fact {step} marker {marker}"})
                    if r.status_code == 201:
                        acked.append((r.json()["user_id"], r.json()["id"], marker))
                else:
                    r = await http.post("/v1/search", json={"query": f"client {index} fact {step}", "k": 5})
            except httpx2.HTTPError as exc:  # not acknowledged: it may or may not have been stored
                errors[f"{op} {type(exc).__name__}"] += 1
                continue
            lat[op].append((time.perf_counter() - start) * 1000)
            if r.status_code >= 300:
                errors[f"{op} {r.status_code}"] += 1


async def _verify(url: str, tokens: dict[str, str], acked: list[tuple[str, str, str]]) -> dict[str, int]:
    import httpx2

    seen_ids: Counter[str] = Counter()
    seen_markers: Counter[str] = Counter()
    async with httpx2.AsyncClient(base_url=url, timeout=120) as http:
        for user, token in tokens.items():
            r = await http.get("/v1/stores/semantic", params={"limit": 1000, "tags": "bench"}, headers={"Authorization": f"Bearer {token}"})
            r.raise_for_status()
            for record in r.json()["records"]:
                seen_ids[record["id"]] += 1
                seen_markers[record["summary"].rsplit(" ", 1)[-1]] += 1
    lost = sum(1 for _, rid, _ in acked if seen_ids[rid] == 0)
    duplicated = sum(1 for _, rid, marker in acked if seen_ids[rid] > 1 or seen_markers[marker] > 1)
    return {"acknowledged": len(acked), "found": sum(seen_ids.values()), "lost": lost, "duplicated": duplicated}


async def run_serve_bench(clients: int = 20, writes: int = 10, searches: int = 10, servers: int = 1, *, embedder: str = "local",
                          s3: bool = False, path: Path | None = None, time_limit: float = 600.0) -> dict[str, Any]:
    """Run the load test and return its report (see the module docstring)."""
    workdir = Path(tempfile.mkdtemp(prefix="memos-bench-serve-"))
    s3_context = loopback_s3("memos-bench") if s3 else None
    procs: list[ServerProcess] = []
    try:
        options = s3_context.__enter__() if s3_context else None
        db = "s3://memos-bench/db" if s3 else str(path or workdir / "db")
        if not s3:
            Path(db).mkdir(parents=True, exist_ok=True)
        admin = "admin-" + secrets.token_hex(16)
        started = time.perf_counter()
        procs.append(ServerProcess(db, admin, embedder, options).start())  # the first creates the tables
        procs += [ServerProcess(db, admin, embedder, options).start() for _ in range(servers - 1)]
        startup_s = time.perf_counter() - started
        tokens = {f"tenant{u}": procs[0].make_key(f"tenant{u}", name=f"bench{u}") for u in range(USERS)}
        await asyncio.sleep(1.6)  # other processes see a new key within ~1.5 s
        users = list(tokens)
        lat: dict[str, list[float]] = {"write": [], "search": []}
        acked: list[tuple[str, str, str]] = []
        errors: Counter[str] = Counter()
        began = time.perf_counter()
        await asyncio.wait_for(asyncio.gather(*[
            _client(i, procs[i % len(procs)].url, tokens[users[i % USERS]], writes, searches, lat, acked, errors)
            for i in range(clients)]), time_limit)
        wall = time.perf_counter() - began
        await asyncio.sleep(1.2)  # a process reads other processes' commits within 1 s
        check = await _verify(procs[-1].url, tokens, acked)
        ops = len(lat["write"]) + len(lat["search"])
        return {
            "clients": clients, "servers": len(procs), "store": "s3 (moto, loopback)" if s3 else "local directory",
            "embedder": embedder, "writes_per_client": writes, "searches_per_client": searches, "operations": ops,
            "wall_s": round(wall, 2), "throughput_ops_s": round(ops / wall, 1), "server_startup_s": round(startup_s, 1),
            "write_ms": percentiles(lat["write"]), "search_ms": percentiles(lat["search"]),
            "errors": dict(errors), **check,
        }
    finally:
        for proc in procs:
            proc.stop()
        if s3_context:
            s3_context.__exit__(None, None, None)
        shutil.rmtree(workdir, ignore_errors=True)
