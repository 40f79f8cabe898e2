"""`memos bench faults`: writers, a worker and crashing servers on one store; every acknowledgement read back.

Two `memos serve` processes share one local store. Client tasks, each with an API key bound to
one agent of one of four users, add facts, change them (PATCH), delete them, record conversation
turns and search, against their own server; a connection refused (the server is down) goes to
the other one. A `memos worker` consolidates and decays each user's memory and maintains the
tables every few seconds. A killer SIGKILLs a server at random moments and restarts it on the
same port. Some facts are written word for word by several agents of a user, some contradict
each other, so consolidation has work that crosses agents if it is allowed to.

Every write is in a ledger (`memos.bench.fault_check.LedgerOp`): acknowledged once its 2xx
response arrived, else "may have happened". When the time or the request budget is spent,
everything stops and `check_store` reopens the store here and counts broken promises. Loopback
only; bounded in time and requests.
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import json
import os
import random
import secrets
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

from .fault_check import LedgerOp, check_store
from .serve import ServerProcess

__all__ = ["AGENTS", "USERS", "run_fault_bench"]

USERS = ("u0", "u1", "u2", "u3")
AGENTS = ("a0", "a1", "a2")
_SHARED = ("likes green tea", "keeps a spare key under the mat", "plays chess on sundays", "is learning welsh")
_CITIES = ("paris", "lisbon", "oslo", "rome")


class _NoServer(Exception):
    """No server accepted a connection until the run's grace period ended (never sent)."""


@dataclass
class _Run:
    servers: list[ServerProcess]
    http: Any
    deadline: float
    budget: int
    ops: list[LedgerOp] = field(default_factory=list)
    errors: Counter[str] = field(default_factory=Counter)
    searches: int = 0
    failovers: int = 0
    kills: int = 0
    restarts: int = 0
    restart_s: list[float] = field(default_factory=list)
    seq: itertools.count[int] = field(default_factory=itertools.count)

    def take(self) -> bool:
        """One more request, if time and the request budget allow."""
        if time.monotonic() >= self.deadline or self.budget <= 0:
            return False
        self.budget -= 1
        return True

    async def send(self, task: int, method: str, path: str, body: Any, key: str) -> Any:
        """The response from the task's server, or from the other one while it refuses connections.

        Only a refused connection is retried (the request never left): a request sent to a
        server that died before answering raises, and the caller records it as unacknowledged."""
        import httpx2

        order = self.servers[task % len(self.servers):] + self.servers[:task % len(self.servers)]
        give_up = self.deadline + 30
        while True:
            for i, server in enumerate(order):
                try:
                    response = await self.http.request(method, server.url + path, json=body,
                                                       headers={"Authorization": f"Bearer {key}"})
                except (httpx2.ConnectError, httpx2.ConnectTimeout):
                    continue
                self.failovers += i > 0
                return response
            if time.monotonic() > give_up:
                raise _NoServer("no server accepted a connection")
            await asyncio.sleep(0.2)


def _fact(rng: random.Random, user: str) -> dict[str, Any]:
    roll = rng.random()
    if roll < 0.2:  # the same words from several agents of the user: duplicates to merge
        return {"subject": user, "summary": f"{user} {rng.choice(_SHARED)}"}
    if roll < 0.3:  # contradictions: the newer supersedes the older
        return {"subject": user, "summary": f"{user} lives in {rng.choice(_CITIES)}"}
    return {"subject": f"{user} topic {rng.randrange(1000)}", "summary": f"{user} filed note {rng.random():.9f}"}


async def _client(run: _Run, task: int, user: str, agent: str, key: str, seed: int) -> None:
    import httpx2

    rng = random.Random(seed)
    live: list[str] = []
    while run.take():
        roll = rng.random()
        op = LedgerOp(next(run.seq), "add", task, user, agent)
        if roll < 0.4 or not live:
            op.marker = f"mk-{secrets.token_hex(8)}"
            request: tuple[str, str, Any] = ("POST", "/v1/stores/semantic", {
                **_fact(rng, user), "source": op.marker, "importance": round(rng.uniform(0.5, 0.9), 3)})
        elif roll < 0.6:
            op.kind, op.record_id, op.value = "update", rng.choice(live), f"details {op.seq}"
            request = ("PATCH", f"/v1/stores/semantic/{op.record_id}", {"details": op.value})
        elif roll < 0.7 and len(live) > 3:
            op.kind, op.record_id = "delete", live.pop(rng.randrange(len(live)))
            request = ("DELETE", f"/v1/stores/semantic/{op.record_id}", None)
        elif roll < 0.75:
            op.kind, op.marker = "turn", f"mk-{secrets.token_hex(8)}"
            request = ("POST", "/v1/messages", {"session_id": f"s{task}", "messages": [{"text": f"turn {op.marker} from {agent}"}]})
        else:
            op.kind = "search"
            request = ("POST", "/v1/search", {"query": f"{user} {rng.choice(_SHARED)}", "k": 5})
        if op.kind != "search":
            run.ops.append(op)
        try:
            response = await run.send(task, *request, key)
        except (httpx2.HTTPError, _NoServer) as exc:  # no answer: it may or may not have happened
            run.errors[f"{op.kind} {type(exc).__name__}"] += 1
            continue
        op.status = response.status_code
        if response.status_code >= 300:
            run.errors[f"{op.kind} {response.status_code}"] += 1
            continue
        op.acked = True
        if op.kind == "add":
            op.record_id = response.json()["id"]
            live.append(op.record_id)
        elif op.kind == "search":
            run.searches += 1


async def _killer(run: _Run, kills: int, began: float, seconds: float, rng: random.Random) -> None:
    """SIGKILL a random server `kills` times at random moments spread over the run, restarting it
    on its port each time (a moment that passed during a restart comes at once after it)."""
    slot = seconds / max(kills, 1)
    for moment in sorted(began + slot * (i + rng.uniform(0.15, 0.85)) for i in range(kills)):
        await asyncio.sleep(max(0.0, moment - time.monotonic()))
        if time.monotonic() >= run.deadline - 1:
            return
        server = rng.choice(run.servers)
        server.kill()
        run.kills += 1
        down = time.monotonic()
        await asyncio.sleep(rng.uniform(0.0, 1.0))  # down for a moment: its clients fail over
        await asyncio.to_thread(server.start)
        run.restarts += 1
        run.restart_s.append(round(time.monotonic() - down, 1))


def _schedule_jobs(db: str, every: float, embedder: str) -> None:
    from memos.jobs.scheduler import MemoryScheduler
    from memos.store.scope import Scope

    options: dict[str, Any] = {"embedder": None if embedder == "none" else embedder}
    with MemoryScheduler(db, mode="manual") as scheduler:
        for user in USERS:  # user-wide, as `memos jobs add consolidate --user u0` schedules it
            scheduler.add("consolidate", Scope(user), every=timedelta(seconds=every), options=options)
            scheduler.add("decay", Scope(user), every=timedelta(seconds=every * 1.5),
                          options={**options, "min_age_days": 0, "threshold": 0.64})
        scheduler.add("maintain", Scope(USERS[0]), every=timedelta(seconds=every * 2), options=options)


def _start_worker(db: str, embedder: str, stop_file: Path, log: Path) -> subprocess.Popen[bytes]:
    """`memos worker` in its own process, logging to `log` (a file: a pipe nobody reads would block it)."""
    with log.open("ab") as err:
        return subprocess.Popen([sys.executable, "-m", "memos.cli", "worker", "--db", db, "--embedder", embedder,
                                 "--stop-file", str(stop_file)], stdout=subprocess.DEVNULL, stderr=err,
                                env={**os.environ, "LANCE_LOG": "error", "HF_HUB_OFFLINE": "1"})


def _tracebacks(path: Path) -> int:
    return path.read_text(errors="replace").count("Traceback") if path.exists() else 0


async def run_fault_bench(seconds: float = 60.0, *, clients: int = 12, kills: int = 5, job_every: float = 2.0,
                          max_requests: int = 20_000, embedder: str = "none", seed: int = 0,
                          path: Path | None = None) -> dict[str, Any]:
    """Run the load with faults for `seconds` (or `max_requests`), then read everything back; the report.

    `path`: keep the store, the logs and the ledger (`ledger.jsonl`) there (default: a temp dir, removed afterwards)."""
    import httpx2

    workdir = path or Path(tempfile.mkdtemp(prefix="memos-bench-faults-"))
    db = str(workdir / "db")
    Path(db).mkdir(parents=True, exist_ok=True)
    rng = random.Random(seed)
    admin = "admin-" + secrets.token_hex(16)
    servers = [ServerProcess(db, admin, embedder, log=workdir / f"server{i}.log") for i in range(2)]
    worker: subprocess.Popen[bytes] | None = None
    stop_file, worker_log = workdir / "worker.stop", workdir / "worker.log"
    started = time.monotonic()
    try:
        for server in servers:  # one after the other: the first creates the tables
            await asyncio.to_thread(server.start)
        tokens = {(u, a): await asyncio.to_thread(servers[0].make_key, u, agent_id=a, name=f"{u}-{a}") for u in USERS for a in AGENTS}
        await asyncio.to_thread(_schedule_jobs, db, job_every, embedder)
        worker = await asyncio.to_thread(_start_worker, db, embedder, stop_file, worker_log)
        await asyncio.sleep(1.6)  # the second server sees the new keys within ~1.5 s
        scopes = list(tokens)
        startup = time.monotonic() - started
        async with httpx2.AsyncClient(timeout=120, limits=httpx2.Limits(max_connections=4 * clients)) as http:
            began = time.monotonic()
            run = _Run(servers, http, began + seconds, max_requests)
            await asyncio.gather(
                _killer(run, kills, began, seconds, random.Random(rng.random())),
                *(_client(run, i, *scopes[i % len(scopes)], tokens[scopes[i % len(scopes)]], rng.randrange(2**32))
                  for i in range(clients)))
            wall = time.monotonic() - began
        for server in servers:
            server.stop()
        stop_file.touch()
        await asyncio.to_thread(worker.wait, 120)
        if path is not None:  # what was tried and acknowledged, for reading the store's rows against it
            (workdir / "ledger.jsonl").write_text("".join(json.dumps(dataclasses.asdict(op)) + "\n" for op in run.ops))
        checking = time.monotonic()
        report = await check_store(db, run.ops, embedder=None if embedder == "none" else embedder)
        timings = {"startup_s": round(startup, 1), "load_s": round(wall, 1), "check_s": round(time.monotonic() - checking, 1)}
        return {
            "servers": len(servers), "clients": clients, "users": len(USERS), "agents_per_user": len(AGENTS),
            "seconds": seconds, **timings, "job_every_s": job_every, "embedder": embedder, "seed": seed,
            "requests": max_requests - run.budget, "searches": run.searches, "failovers": run.failovers,
            "kills": run.kills, "restarts": run.restarts, "restart_s": run.restart_s, "errors": dict(sorted(run.errors.items())),
            "server_tracebacks": sum(_tracebacks(s.log) for s in servers if s.log is not None),
            "worker_tracebacks": _tracebacks(worker_log), **report,
        }
    finally:
        for server in servers:
            server.kill()
        if worker is not None and worker.poll() is None:
            worker.kill()
            worker.wait()
        if path is None:
            shutil.rmtree(workdir, ignore_errors=True)
