"""`memos bench serve`: N concurrent HTTP clients writing and searching through `memos serve` on loopback.

One or several server processes (each spawned as a fresh `memos serve`, sharing nothing but
the store) run on a temp directory or on a loopback S3 server (moto). Each client has a user's
API key, writes facts and searches between writes. A run reports throughput, p50/p95/p99 latency
per operation and errors by status, then reads every user's store back to check that each
acknowledged (2xx) write is there exactly once (none lost, none duplicated). A client honours
`Retry-After` on a 503 or 429 (the server shedding load): it waits, counts the refusal, and sends
the same write again, so a refusal that had stored something would show as a duplicate.
`run_serve_curve` runs every combination of client counts, embedders and server counts (one
store and set of servers per embedder and server count, the client counts in increasing order
on it) and makes a table of them. Counts and time are bounded: each run stops starting
operations at its time limit. Each run also reports the servers' CPU per operation and what their
queues did during it (`server_queues`, from each server's `GET /admin/stats`: add batches and
their callers, a batch's time, of which embedding, and the wait for more callers before it).

The clients themselves cost CPU (1-2 ms an operation: HTTP and JSON in Python), so one process
of them tops out near 400-500 operations a second, about what several server processes serve on
a 16-core machine: there the clients are spread over several processes (`load_processes`), which
start together and report back to the run; on a small machine they stay in one, beside the
servers. Each run reports that CPU too (`client_cpu_ms_per_op`) and how busy the machine's cores
were (`machine_busy`), so a figure from a machine the clients share can be read as such.

`hold` runs the same mix for a fixed time instead of a fixed count (`memos bench serve --hold 180`),
and reports each `window` of it: ops/s, latency and the servers' CPU an operation as the store
grows (a run of seconds does not show what a minute of growth costs). The read-back is the
users' export (`GET /v1/export`), which has no cap, so a held run's writes are all checked too.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import math
import multiprocessing
import os
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from memos._proc import machine_ticks

from ._stats import percentiles

__all__ = ["CURVE_CLIENTS", "CURVE_COLUMNS", "CURVE_EMBEDDERS", "CURVE_SERVERS", "ServerProcess", "curve_table", "free_port",
           "load_processes", "loopback_s3", "process_cpu_seconds", "queue_summary", "retry_delay", "run_load", "run_serve_bench", "run_serve_curve", "windows"]

USERS = 4
CURVE_CLIENTS = (1, 5, 20, 50, 100)
CURVE_EMBEDDERS = ("local", "none")
CURVE_SERVERS = (1, 2)
MAX_TRIES = 5
"""Sends of one operation at most (the first and the retries a `Retry-After` asked for)."""
MAX_RETRY_WAIT = 10.0
GRACE_S = 30.0
"""How long a run waits, past its time limit, for the operations still in flight before cancelling them."""
CLIENTS_PER_PROCESS = 5
"""Clients a load process is given at least when they are spread over several (`load_processes`)."""
START_TIMEOUT = 120.0
"""Seconds the load processes have to start (import, then meet at the start line)."""


def load_processes(clients: int) -> int:
    """How many processes the clients of a run are spread over by default: one per
    `CLIENTS_PER_PROCESS` clients, at most a quarter of the machine's cores (the rest are the
    servers'), so one on a machine of fewer than 8 cores."""
    return max(1, min(clients // CLIENTS_PER_PROCESS, (os.cpu_count() or 1) // 4))


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

    def stats(self) -> dict[str, Any] | None:
        """The server's queues (`GET /admin/stats`), or None where it does not answer them."""
        import httpx2

        try:
            r = httpx2.get(self.url + "/admin/stats", headers={"Authorization": f"Bearer {self.admin_key}"}, timeout=30)
        except httpx2.HTTPError:
            return None
        return r.json() if r.status_code == 200 else None

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


@dataclass
class _Tally:
    """What the clients of one run measured (shared by them; one event loop, so no locks)."""

    lat: dict[str, list[float]] = field(default_factory=lambda: {"write": [], "search": []})
    acked: list[tuple[str, str, str]] = field(default_factory=list)
    errors: Counter[str] = field(default_factory=Counter)
    """Refusals by HTTP status ("503") or by exception name ("ReadTimeout"), retried ones included."""
    retries: int = 0
    unfinished: int = 0
    """Operations that got no 2xx: failed after their tries, or were cut off at the time limit."""
    timeline: list[tuple[float, str, float]] = field(default_factory=list)
    """(monotonic end, operation, ms) of each acknowledged operation of a held run (`hold`)."""


def retry_delay(value: str | None) -> float | None:
    """Seconds a `Retry-After` header asks for (delay-seconds; an HTTP date counts as 1 s), capped; None without one."""
    if value is None:
        return None
    try:
        return min(max(float(value), 0.0), MAX_RETRY_WAIT)
    except ValueError:
        return 1.0


async def _send(send: Any, tally: _Tally, deadline: float) -> Any:
    """Send one operation, again after each `Retry-After` (while tries and time last); the last
    response, or None if the connection failed. Every non-2xx answer is counted by status."""
    import httpx2

    for attempt in range(MAX_TRIES):
        try:
            r = await send()
        except httpx2.HTTPError as exc:  # not acknowledged: it may or may not have been stored
            tally.errors[type(exc).__name__] += 1
            return None
        if r.status_code < 300:
            return r
        tally.errors[str(r.status_code)] += 1
        delay = retry_delay(r.headers.get("retry-after")) if r.status_code in (429, 503) else None
        if delay is None or attempt == MAX_TRIES - 1 or time.perf_counter() + delay > deadline:
            return r
        tally.retries += 1
        await asyncio.sleep(delay)
    return None


def _operations(writes: int, searches: int, hold: bool) -> Iterator[str]:
    """A client's operations: writes and searches alternating while both last, the rest of the
    longer kind after; held, alternating until the time is up."""
    if hold:
        yield from itertools.cycle(("write", "search"))
    order = [op for pair in zip(["write"] * writes, ["search"] * searches) for op in pair]
    yield from order + ["write"] * (writes - len(order) // 2) + ["search"] * (searches - len(order) // 2)


async def _client(index: int, url: str, token: str, writes: int, searches: int, tag: str, tally: _Tally, deadline: float,
                  hold: bool = False) -> None:
    import httpx2

    headers = {"Authorization": f"Bearer {token}"}
    async with httpx2.AsyncClient(base_url=url, headers=headers, timeout=120) as http:
        for step, op in enumerate(_operations(writes, searches, hold)):
            if time.perf_counter() >= deadline:
                if not hold:  # a held run's clients just stop starting operations
                    tally.unfinished += writes + searches - step
                return
            start = time.perf_counter()
            if op == "write":
                marker = uuid.uuid4().hex[:12]
                fact = {"subject": f"client {index}", "tags": ["bench", tag], "summary": f"client {index} wrote fact {step} marker {marker}"}
                r = await _send(lambda: http.post("/v1/stores/semantic", json=fact), tally, deadline)
            else:
                query = {"query": f"client {index} fact {step}", "k": 5}
                r = await _send(lambda: http.post("/v1/search", json=query), tally, deadline)
            if r is None or r.status_code >= 300:
                tally.unfinished += 1
                continue
            ms = (time.perf_counter() - start) * 1000  # the whole operation, waits for retries included
            tally.lat[op].append(ms)
            if hold:
                tally.timeline.append((time.monotonic(), op, ms))
            if op == "write":
                tally.acked.append((r.json()["user_id"], r.json()["id"], marker))


async def _verify(url: str, tokens: dict[str, str], tag: str, acked: list[tuple[str, str, str]]) -> dict[str, int]:
    """Every acknowledged write looked for in its user's export (all of it: the list endpoint stops at 1,000)."""
    import httpx2

    seen_ids: Counter[str] = Counter()
    seen_markers: Counter[str] = Counter()
    async with httpx2.AsyncClient(base_url=url, timeout=600) as http:
        for token in tokens.values():
            r = await http.get("/v1/export", headers={"Authorization": f"Bearer {token}"})
            r.raise_for_status()
            for line in r.text.splitlines():
                entry = json.loads(line)
                record = entry.get("record") if entry.get("kind") == "record" and entry.get("memory_type") == "semantic" else None
                if record is None or tag not in record.get("tags", ()):
                    continue
                seen_ids[record["id"]] += 1
                seen_markers[record["summary"].rsplit(" ", 1)[-1]] += 1
    lost = sum(1 for _, rid, _ in acked if seen_ids[rid] == 0)
    duplicated = sum(1 for _, rid, marker in acked if seen_ids[rid] > 1 or seen_markers[marker] > 1)
    return {"acknowledged": len(acked), "found": sum(seen_ids.values()), "lost": lost, "duplicated": duplicated}


def process_cpu_seconds(pids: list[int]) -> float | None:
    """CPU seconds (user + system) the processes `pids` and their live children have used so far,
    from /proc (None where there is no /proc): a server's own threads and its encoder workers."""
    ticks = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
    wanted, total = set(pids), 0
    try:
        entries = [e for e in os.listdir("/proc") if e.isdigit()]
    except OSError:
        return None
    for entry in entries:
        try:
            with open(f"/proc/{entry}/stat", encoding="ascii", errors="replace") as handle:
                fields = handle.read().rpartition(")")[2].split()
        except OSError:  # the process ended meanwhile
            continue
        if int(entry) in wanted or int(fields[1]) in wanted:  # fields[1]: the parent's pid
            total += int(fields[11]) + int(fields[12])  # utime, stime
    return total / ticks


async def _clients(indices: list[int], urls: list[str], tokens: dict[str, str], writes: int, searches: int, tag: str,
                   tally: _Tally, time_limit: float, hold: bool = False) -> bool:
    """Run the clients numbered `indices` (client i: server i mod servers, user i mod users) until
    they are done or `GRACE_S` past `time_limit`; whether some had to be cancelled."""
    users = list(tokens)
    deadline = time.perf_counter() + time_limit
    tasks = [asyncio.ensure_future(_client(i, urls[i % len(urls)], tokens[users[i % len(users)]], writes, searches, tag, tally, deadline,
                                           hold)) for i in indices]
    _, pending = await asyncio.wait(tasks, timeout=time_limit + GRACE_S)
    for task in pending:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    return bool(pending)


def _load_part(out: Any, start: Any, indices: list[int], urls: list[str], tokens: dict[str, str], writes: int, searches: int,
               tag: str, time_limit: float, hold: bool = False) -> None:
    """One load process (spawned): its clients start when every process is at the start line,
    and what they measured goes back through `out`."""
    import httpx2  # noqa: F401  (imported before the start line, not inside the timed run)

    tally = _Tally()
    start.wait(START_TIMEOUT)
    cpu = time.process_time()
    cut = asyncio.run(_clients(indices, urls, tokens, writes, searches, tag, tally, time_limit, hold))
    out.send({"lat": tally.lat, "acked": tally.acked, "errors": dict(tally.errors), "retries": tally.retries,
              "unfinished": tally.unfinished, "cut": cut, "timeline": tally.timeline, "cpu_s": time.process_time() - cpu})
    out.close()


async def _spread(processes: int, clients: int, urls: list[str], tokens: dict[str, str], writes: int, searches: int, tag: str,
                  tally: _Tally, time_limit: float, hold: bool = False) -> tuple[float, bool, float, tuple[int, int] | None]:
    """Run the clients in `processes` spawned processes that start together; their measures are
    added to `tally`. Returns the load's wall time (from the common start), whether any client
    was cancelled, the CPU seconds the load processes spent running their clients and the
    machine's `machine_ticks` at the common start (their start-up not counted)."""
    context = multiprocessing.get_context("spawn")  # never fork: the parent may have used LanceDB
    start = context.Barrier(processes + 1)
    parts = []
    for k in range(processes):
        receive, send = context.Pipe(duplex=False)
        proc = context.Process(target=_load_part, args=(send, start, list(range(k, clients, processes)), urls, tokens, writes,
                                                        searches, tag, time_limit, hold), daemon=True)
        proc.start()
        send.close()
        parts.append((proc, receive))
    try:
        try:
            await asyncio.to_thread(start.wait, START_TIMEOUT)
        except threading.BrokenBarrierError as exc:
            raise RuntimeError(f"the {processes} load processes did not all start within {START_TIMEOUT:g} s") from exc
        began, ticks = time.perf_counter(), machine_ticks()
        cut, cpu = False, 0.0
        for proc, receive in parts:
            try:
                part = await asyncio.to_thread(receive.recv)
            except EOFError as exc:
                raise RuntimeError(f"a load process ended without its results (exit code {proc.exitcode})") from exc
            for op, values in part["lat"].items():
                tally.lat[op] += values
            tally.acked += [tuple(a) for a in part["acked"]]
            tally.errors.update(part["errors"])
            tally.retries += part["retries"]
            tally.unfinished += part["unfinished"]
            tally.timeline += [tuple(t) for t in part["timeline"]]  # CLOCK_MONOTONIC: one clock across processes
            cut = cut or part["cut"]
            cpu += part["cpu_s"]
        return time.perf_counter() - began, cut, cpu, ticks
    finally:
        for proc, receive in parts:
            receive.close()
            proc.join(timeout=10)
            if proc.is_alive():
                proc.kill()


async def _sample_cpu(pids: list[int], samples: list[tuple[float, float]], every: float = 1.0) -> None:
    """(monotonic time, the servers' CPU seconds) every `every` seconds, until cancelled."""
    while True:
        cpu = process_cpu_seconds(pids)
        if cpu is not None:
            samples.append((time.monotonic(), cpu))
        await asyncio.sleep(every)


def _cpu_at(samples: list[tuple[float, float]], when: float) -> float | None:
    """The servers' CPU seconds at the sample nearest `when`."""
    return min(samples, key=lambda s: abs(s[0] - when))[1] if samples else None


def windows(timeline: list[tuple[float, str, float]], window: float, cpu: list[tuple[float, float]] | None = None,
            span: float | None = None) -> list[dict[str, Any]]:
    """A held run cut into `window`-second windows from its first operation's start (over `span`
    seconds, its hold; the operations that end after go in the last): each window's operations,
    ops/s, write and search p50/p95, and (with `cpu` samples) the servers' CPU an operation in it."""
    if not timeline:
        return []
    origin, last = min(end - ms / 1000 for end, _, ms in timeline), max(end for end, _, _ in timeline)
    count = max(1, math.ceil((last - origin if span is None else span) / window - 1e-6))
    out = []
    for k in range(count):
        start, final = origin + k * window, k == count - 1
        if not final:
            end = start + window
        else:  # to the hold's end, or to the last operation's if that ended later (or there is no hold)
            end = max(last, origin + count * window) if span is not None else last
        ops = [(op, ms) for t, op, ms in timeline if t >= start and (final or t < end)]
        row: dict[str, Any] = {"t_s": round(end - origin, 1), "operations": len(ops), "ops_s": round(len(ops) / max(end - start, 1e-9), 1),
                               "write_ms": percentiles([ms for op, ms in ops if op == "write"], (50, 95)),
                               "search_ms": percentiles([ms for op, ms in ops if op == "search"], (50, 95))}
        if cpu:
            before, after = _cpu_at(cpu, start), _cpu_at(cpu, end)
            row["server_cpu_ms_per_op"] = round((after - before) * 1000 / len(ops), 1) if ops and before is not None and after is not None else None
        out.append(row)
    return out


async def run_load(urls: list[str], tokens: dict[str, str], clients: int, writes: int, searches: int, *,
                   time_limit: float = 600.0, tag: str = "bench", server_pids: list[int] | None = None,
                   processes: int | None = None, settle_s: float = 0.0, hold: float | None = None,
                   window: float = 30.0) -> dict[str, Any]:
    """One run of `clients` clients spread over the servers at `urls` (each client one of `tokens`'
    users), its writes tagged `tag`; then every acknowledged write is looked for. Operations stop
    starting after `time_limit` seconds; those still in flight `GRACE_S` later are cancelled.
    With `server_pids`, the servers' CPU during the load (the read-back not counted) per operation.
    Also reported: the load processes' own CPU per operation (`client_cpu_ms_per_op`: on a small
    machine the clients share the servers' cores) and the share of the machine's cores that were
    busy meanwhile (`machine_busy`, 0-1, from /proc/stat; None without it).
    The clients run in this process, or in `processes` processes of their own (default:
    `load_processes`; never more than there are clients). `settle_s`: seconds to wait before the
    read-back, for servers that see each other's writes only after a while (object storage).
    `hold`: each client alternates writes and searches for that many seconds instead (`writes` and
    `searches` unused), and the report has the run's `windows`."""
    processes = max(1, min(clients, load_processes(clients) if processes is None else processes))
    held = hold is not None
    if hold is not None:
        time_limit = hold
    cpu_before = process_cpu_seconds(server_pids) if server_pids else None
    machine_before = machine_ticks()
    samples: list[tuple[float, float]] = []
    sampler = asyncio.ensure_future(_sample_cpu(server_pids, samples)) if held and server_pids else None
    tally = _Tally()
    try:
        if processes == 1:
            began, load_cpu = time.perf_counter(), time.process_time()
            cut = await _clients(list(range(clients)), urls, tokens, writes, searches, tag, tally, time_limit, held)
            wall, load_cpu = time.perf_counter() - began, time.process_time() - load_cpu
        else:
            wall, cut, load_cpu, machine_before = await _spread(processes, clients, urls, tokens, writes, searches, tag, tally,
                                                                time_limit, held)
    finally:
        if sampler is not None:
            sampler.cancel()
    cpu_after = process_cpu_seconds(server_pids) if server_pids else None
    machine_after = machine_ticks()
    if len(urls) > 1 and settle_s:  # (on a local store every server finds every acknowledged write at once)
        await asyncio.sleep(settle_s)
    check = await _verify(urls[-1], tokens, tag, tally.acked)
    ops = len(tally.lat["write"]) + len(tally.lat["search"])
    return {
        "clients": clients, "servers": len(urls), "writes_per_client": writes, "searches_per_client": searches, "operations": ops,
        "wall_s": round(wall, 2), "throughput_ops_s": round(ops / wall, 1) if wall else 0.0,
        "write_ms": percentiles(tally.lat["write"], (50, 95, 99)), "search_ms": percentiles(tally.lat["search"], (50, 95, 99)),
        "errors": dict(sorted(tally.errors.items())), "retries": tally.retries, "unfinished": tally.unfinished,
        "cut_off": cut or (tally.unfinished > 0 and wall >= time_limit), "load_processes": processes, **check,
        "server_cpu_ms_per_op": (round((cpu_after - cpu_before) * 1000 / ops, 1)
                                 if cpu_before is not None and cpu_after is not None and ops else None),
        "client_cpu_ms_per_op": round(load_cpu * 1000 / ops, 2) if ops else None,
        "machine_busy": (round((machine_after[0] - machine_before[0]) / (machine_after[1] - machine_before[1]), 3)
                         if machine_before is not None and machine_after is not None and machine_after[1] > machine_before[1] else None),
        **({"hold_s": hold, "windows": windows(sorted(tally.timeline), window, samples, hold)} if held else {}),
    }


@contextmanager
def _servers(count: int, embedder: str, *, s3: bool = False, path: Path | None = None) -> Iterator[tuple[list[ServerProcess], str]]:
    """`count` fresh server processes on one fresh store (a temp directory, `path`, or loopback S3)."""
    workdir = Path(tempfile.mkdtemp(prefix="memos-bench-serve-"))
    s3_context = loopback_s3("memos-bench") if s3 else None
    procs: list[ServerProcess] = []
    try:
        options = s3_context.__enter__() if s3_context else None
        db = "s3://memos-bench/db" if s3 else str(path or workdir / "db")
        if not s3:
            Path(db).mkdir(parents=True, exist_ok=True)
        admin = "admin-" + secrets.token_hex(16)
        procs.append(ServerProcess(db, admin, embedder, options).start())  # the first creates the tables
        procs += [ServerProcess(db, admin, embedder, options).start() for _ in range(count - 1)]
        yield procs, "s3 (moto, loopback)" if s3 else "local directory"
    finally:
        for proc in procs:
            proc.stop()
        if s3_context:
            s3_context.__exit__(None, None, None)
        shutil.rmtree(workdir, ignore_errors=True)


def queue_summary(before: list[dict[str, Any] | None], after: list[dict[str, Any] | None]) -> dict[str, Any] | None:
    """What the servers' queues did between two reads of their `/admin/stats`, summed over the
    servers: add batches and their callers, where an add batch's time went (embedding, the rest
    writing; the wait for more callers before it), query-embedding batches and their queries, and
    the LanceDB calls the servers tried again (commits that met another writer's)."""
    pairs = [(a, b) for a, b in zip(after, before, strict=True) if a is not None and b is not None]
    if not pairs or len(pairs) < len(after):
        return None

    def one(stats: dict[str, Any], key: str, field: str | None) -> float:
        value = stats[key] if field is None else (stats[key] or {}).get(field, 0)
        return float(value or 0)

    def total(key: str, field: str | None = None) -> float:
        return sum(one(a, key, field) - one(b, key, field) for a, b in pairs)

    batches, calls, busy = total("adds", "batches"), total("adds", "calls"), total("adds", "busy_s")
    query_batches, queries = total("query_embeddings", "batches"), total("query_embeddings", "calls")
    return {
        "add_calls": int(calls), "add_batches": int(batches), "callers_per_add_batch": round(calls / batches, 2) if batches else None,
        "add_batch_ms": round(busy * 1000 / batches, 1) if batches else None,
        "add_embedding_ms": round(total("adds_embedding_s") * 1000 / batches, 1) if batches else None,
        "add_wait_ms": round(total("adds", "waited_s") * 1000 / batches, 1) if batches else None,
        "query_batches": int(query_batches), "queries_per_batch": round(queries / query_batches, 2) if query_batches else None,
        "query_batch_ms": round(total("query_embeddings", "busy_s") * 1000 / query_batches, 1) if query_batches else None,
        "commit_conflicts": int(total("store_retries", "conflicts")), "purged_reads": int(total("store_retries", "purged")),
        "retry_sleep_s": round(total("store_retries", "slept_s"), 3),
        "journal_waits": int(total("store_retries", "journal_waits")), "journal_wait_s": round(total("store_retries", "journal_wait_s"), 3),
    }


async def _load(procs: list[ServerProcess], tokens: dict[str, str], clients: int, writes: int, searches: int, **options: Any) -> dict[str, Any]:
    """`run_load` on these servers, with their CPU and what their queues did meanwhile (`server_queues`)."""
    before = [p.stats() for p in procs]
    settle_s = 2.5 if procs[0].storage_options is not None else 0.0  # object storage: other processes' commits show within 1 s
    report = await run_load([p.url for p in procs], tokens, clients, writes, searches, server_pids=_pids(procs), settle_s=settle_s, **options)
    return {**report, "server_queues": queue_summary(before, [p.stats() for p in procs])}


def _pids(procs: list[ServerProcess]) -> list[int]:
    return [p.proc.pid for p in procs if p.proc is not None]


async def _keys(procs: list[ServerProcess], prefix: str, s3: bool) -> dict[str, str]:
    tokens = {f"{prefix}{u}": procs[0].make_key(f"{prefix}{u}", name=f"bench{u}") for u in range(USERS)}
    if len(procs) > 1 and s3:
        await asyncio.sleep(1.6)  # on object storage other processes see a new key within ~1.5 s (a local store's at once)
    return tokens


async def run_serve_bench(clients: int = 20, writes: int = 10, searches: int = 10, servers: int = 1, *, embedder: str = "local",
                          s3: bool = False, path: Path | None = None, time_limit: float = 600.0,
                          load_processes: int | None = None, hold: float | None = None, window: float = 30.0) -> dict[str, Any]:
    """Run the load test once and return its report (see the module docstring)."""
    started = time.perf_counter()
    with _servers(servers, embedder, s3=s3, path=path) as (procs, store):
        startup_s = time.perf_counter() - started
        tokens = await _keys(procs, "tenant", s3)
        report = await _load(procs, tokens, clients, writes, searches, time_limit=time_limit, processes=load_processes,
                             hold=hold, window=window)
    return {**report, "store": store, "embedder": embedder, "server_startup_s": round(startup_s, 1)}


async def run_serve_curve(clients: tuple[int, ...] = CURVE_CLIENTS, embedders: tuple[str, ...] = CURVE_EMBEDDERS,
                          servers: tuple[int, ...] = CURVE_SERVERS, *, writes: int = 10, searches: int = 10, s3: bool = False,
                          time_limit: float = 60.0, progress: Any = None, load_processes: int | None = None) -> dict[str, Any]:
    """Every combination of client count, embedder and server count, one bounded run each: a row
    per run (as `run_load` reports it, with its embedder) and the table of them."""
    rows = []
    for embedder in embedders:
        for count in servers:
            started = time.perf_counter()
            with _servers(count, embedder, s3=s3) as (procs, store):
                startup_s = round(time.perf_counter() - started, 1)
                for n, client_count in enumerate(sorted(clients)):
                    tokens = await _keys(procs, f"c{client_count}u", s3)  # each run its own users: its reads see only its writes
                    row = await _load(procs, tokens, client_count, writes, searches, time_limit=time_limit, tag=f"run{n}",
                                      processes=load_processes)
                    rows.append({"embedder": embedder, **row, "store": store, "server_startup_s": startup_s})
                    if progress is not None:
                        progress(rows[-1])
    return {"clients": sorted(clients), "embedders": list(embedders), "servers": list(servers), "writes_per_client": writes,
            "searches_per_client": searches, "time_limit_s_per_run": time_limit, "runs": rows, "table": curve_table(rows),
            "lost": sum(r["lost"] for r in rows), "duplicated": sum(r["duplicated"] for r in rows)}


CURVE_COLUMNS = ("clients", "embedder", "servers", "ops/s", "server CPU ms/op", "clients' CPU ms/op", "machine busy",
                 "write p50/p95/p99 ms", "search p50/p95/p99 ms", "errors", "lost", "duplicated")


def _share(value: float | None) -> str | None:
    return None if value is None else f"{value:.0%}"


def curve_table(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The curve's rows as `CURVE_COLUMNS` (what `memos bench serve` prints)."""
    def ms(p: dict[str, float]) -> str:
        return f"{p['p50']:,.0f} / {p['p95']:,.0f} / {p['p99']:,.0f}"

    return [dict(zip(CURVE_COLUMNS, (r["clients"], r["embedder"], r["servers"], r["throughput_ops_s"],
                                     r.get("server_cpu_ms_per_op"), r.get("client_cpu_ms_per_op"), _share(r.get("machine_busy")),
                                     ms(r["write_ms"]), ms(r["search_ms"]), json.dumps(r["errors"]), r["lost"], r["duplicated"])))
            for r in rows]
