"""`memos bench serve`: a tiny curve end to end, and the clients' handling of a server shedding load."""

from __future__ import annotations

import time

from _loopback import LoopbackServer

from memos.bench.serve import CURVE_COLUMNS, run_load, run_serve_curve


async def test_a_tiny_curve_reports_each_run_and_every_acknowledged_write_is_there_once():
    report = await run_serve_curve((2, 1), ("none",), (1,), writes=2, searches=1, time_limit=60)
    assert [(r["clients"], r["embedder"], r["servers"]) for r in report["runs"]] == [(1, "none", 1), (2, "none", 1)]
    for run in report["runs"]:
        assert set(run["write_ms"]) == set(run["search_ms"]) == {"p50", "p95", "p99"}
        assert run["operations"] == run["clients"] * 3 and run["acknowledged"] == run["found"] == run["clients"] * 2
        assert run["errors"] == {} and run["lost"] == run["duplicated"] == 0 and run["throughput_ops_s"] > 0
        assert run["server_cpu_ms_per_op"] is not None and run["server_cpu_ms_per_op"] > 0  # a server spends CPU on requests
        assert run["client_cpu_ms_per_op"] > 0 and 0 < run["machine_busy"] <= 1  # and so do the clients, on the same machine
        queues = run["server_queues"]  # from the server's GET /admin/stats, this run's share only
        assert queues["add_calls"] == run["clients"] * 2 and 1 <= queues["add_batches"] <= queues["add_calls"]
        assert queues["add_batch_ms"] > 0 and queues["query_batches"] == 0  # no embedder: no query is embedded
    assert [list(row) for row in report["table"]] == [list(CURVE_COLUMNS)] * 2
    assert report["lost"] == report["duplicated"] == 0


class ShedWrites:
    """In front of the real app: the first `count` writes get 503 with `Retry-After: 1` (the
    request never reaches the app), as a server shedding load answers; the times are kept."""

    def __init__(self, app, count: int) -> None:
        self.app, self.left = app, count
        self.writes: list[tuple[float, int]] = []

    async def __call__(self, scope, receive, send):
        if scope["type"] == "http" and scope["method"] == "POST" and scope["path"] == "/v1/stores/semantic":
            if self.left > 0:
                self.left -= 1
                self.writes.append((time.monotonic(), 503))
                await send({"type": "http.response.start", "status": 503, "headers": [(b"retry-after", b"1"), (b"content-length", b"0")]})
                await send({"type": "http.response.body", "body": b""})
                return
            self.writes.append((time.monotonic(), 201))
        await self.app(scope, receive, send)


async def test_a_503_with_retry_after_is_counted_waited_out_and_retried_without_losing_or_doubling(tmp_path):
    shed: list[ShedWrites] = []
    with LoopbackServer(str(tmp_path), wrap=lambda app: shed.append(ShedWrites(app, 2)) or shed[0]) as server:
        tokens = {"u0": server.make_key("u0"), "u1": server.make_key("u1")}
        run = await run_load([server.url], tokens, clients=2, writes=2, searches=1, time_limit=60)
    assert run["errors"] == {"503": 2} and run["retries"] == 2 and run["unfinished"] == 0
    assert run["acknowledged"] == run["found"] == 4 and run["lost"] == run["duplicated"] == 0
    times = shed[0].writes
    assert [status for _, status in times].count(201) == 4
    first_retry = next(t for t, status in times if status == 201)
    assert first_retry - times[0][0] >= 0.95  # the retry waited for what Retry-After asked


def test_process_cpu_counts_a_process_and_its_live_children():
    import os
    import subprocess
    import sys

    from memos.bench.serve import process_cpu_seconds

    child = subprocess.Popen([sys.executable, "-c", "import time\nend = time.process_time() + 0.5\nwhile time.process_time() < end: pass\ntime.sleep(30)"])
    try:
        before = process_cpu_seconds([os.getpid()])
        deadline = time.monotonic() + 30
        while process_cpu_seconds([child.pid]) < 0.45 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert process_cpu_seconds([child.pid]) >= 0.45  # its own half second, counted as a process of its own
        assert process_cpu_seconds([os.getpid()]) - before >= 0.4  # and in its parent's, while it runs
    finally:
        child.kill()
        child.wait()


def test_the_curve_options_refuse_what_they_cannot_run():
    from typer.testing import CliRunner

    from memos.cli import app

    runner = CliRunner()
    for args, said in ((["--clients", "1,x"], "comma-separated"), (["--clients", "0,5"], "from 1 to 200"),
                       (["--embedder", "none,hashed"], "unknown --embedder 'hashed'"), (["--clients", "1,500"], "from 1 to 200")):
        out = runner.invoke(app, ["bench", "serve", *args])
        assert out.exit_code == 2 and said in out.output, (args, out.output)


async def test_clients_spread_over_load_processes_start_together_and_every_write_is_counted_once(tmp_path):
    """On a machine of many cores one process of clients would be the bottleneck (`load_processes`):
    the clients then run in several spawned processes whose measures add up to one run."""
    with LoopbackServer(str(tmp_path)) as server:
        tokens = {"u0": server.make_key("u0"), "u1": server.make_key("u1")}
        run = await run_load([server.url], tokens, clients=5, writes=3, searches=2, time_limit=60, processes=2)
    assert run["load_processes"] == 2 and run["operations"] == 25 and run["unfinished"] == 0 and run["errors"] == {}
    assert run["acknowledged"] == run["found"] == 15 and run["lost"] == run["duplicated"] == 0
    assert not run["cut_off"]
    assert run["client_cpu_ms_per_op"] > 0 and 0 < run["machine_busy"] <= 1  # the load processes' own CPU, sent back with their measures


def test_the_clients_get_processes_of_their_own_only_on_a_machine_with_cores_to_spare(monkeypatch):
    from memos.bench import serve

    monkeypatch.setattr(serve.os, "cpu_count", lambda: 16)
    assert [serve.load_processes(n) for n in (1, 4, 5, 12, 20, 100)] == [1, 1, 1, 2, 4, 4]
    monkeypatch.setattr(serve.os, "cpu_count", lambda: 2)
    assert serve.load_processes(100) == 1  # the servers need the cores


def test_the_queue_summary_sums_the_servers_and_divides_by_batches():
    from memos.bench.serve import queue_summary

    def stats(calls, batches, busy, waited, embedding, queries=None, retries=None):
        return {"adds": {"calls": calls, "batches": batches, "pending": 0, "busy_s": busy, "waited_s": waited},
                "adds_embedding_s": embedding, "query_embeddings": queries, "store_retries": retries}

    before = [stats(10, 5, 1.0, 0.1, 0.5, retries={"conflicts": 2, "purged": 0, "slept_s": 0.05}), stats(0, 0, 0.0, 0.0, 0.0)]
    after = [stats(40, 15, 2.0, 0.3, 1.1, {"calls": 30, "batches": 10, "pending": 0, "busy_s": 0.5, "waited_s": 0.0},
                   {"conflicts": 5, "purged": 1, "slept_s": 0.3, "journal_waits": 3, "journal_wait_s": 0.25}),
             stats(30, 10, 1.5, 0.2, 0.9, retries={"conflicts": 1, "purged": 0, "slept_s": 0.02})]
    summary = queue_summary(before, after)
    assert summary == {"add_calls": 60, "add_batches": 20, "callers_per_add_batch": 3.0, "add_batch_ms": 125.0,
                       "add_embedding_ms": 75.0, "add_wait_ms": 20.0, "query_batches": 10, "queries_per_batch": 3.0,
                       "query_batch_ms": 50.0, "commit_conflicts": 4, "purged_reads": 1, "retry_sleep_s": 0.27,
                       "journal_waits": 3, "journal_wait_s": 0.25}  # (a server from before they were counted: none)
    assert queue_summary(before, [after[0], None]) is None and queue_summary([], []) is None


async def test_a_held_run_reports_its_windows_and_reads_every_write_back_from_the_export(tmp_path):
    """`--hold`: the clients alternate writes and searches for a time rather than a count, in two
    load processes here, and the report cuts the run into windows; every acknowledged write is
    looked for in the users' exports (no 1,000-record cap, as the list endpoint has)."""
    with LoopbackServer(str(tmp_path)) as server:
        tokens = {"u0": server.make_key("u0"), "u1": server.make_key("u1")}
        run = await run_load([server.url], tokens, clients=4, writes=1, searches=1, time_limit=60, processes=2, hold=3.0, window=1.0)
    assert run["hold_s"] == 3.0 and run["unfinished"] == 0 and run["errors"] == {} and not run["cut_off"]
    assert run["operations"] > 8  # more than the 1 write + 1 search each that the counts would have given
    assert run["acknowledged"] == run["found"] and run["lost"] == run["duplicated"] == 0
    assert len(run["windows"]) == 3 and all(w["ops_s"] > 0 for w in run["windows"])
    assert sum(w["operations"] for w in run["windows"]) == run["operations"]  # each acknowledged operation in one window


def test_windows_cut_a_timeline_by_time_and_divide_the_servers_cpu_by_its_operations():
    from memos.bench.serve import windows

    timeline = [(100.0 + t, op, ms) for t, op, ms in ((0.5, "write", 500.0), (1.0, "search", 10.0), (1.5, "write", 20.0),
                                                       (2.2, "search", 30.0), (2.5, "write", 40.0), (3.0, "search", 50.0))]
    cpu = [(100.0, 1.0), (101.0, 1.2), (102.0, 1.6), (103.0, 1.7)]  # the first operation started at 100.0
    rows = windows(timeline, 1.0, cpu)
    assert windows(timeline, 1.0, cpu, span=3.0) == rows  # held 3 s: the same three windows
    assert [r["operations"] for r in windows(timeline, 1.0, span=2.0)] == [1, 5]  # held 2 s: what ended after goes in the last
    assert [r["t_s"] for r in rows] == [1.0, 2.0, 3.0]
    assert [r["operations"] for r in rows] == [1, 2, 3] and [r["ops_s"] for r in rows] == [1.0, 2.0, 3.0]  # ends at 100.5 | 101.0, 101.5 | 102.2, 102.5, 103.0 (the last kept)
    assert rows[1]["write_ms"]["p50"] == 20.0 and rows[1]["search_ms"]["p50"] == 10.0
    assert [r["server_cpu_ms_per_op"] for r in rows] == [200.0, 200.0, 33.3]


def test_a_held_run_is_one_combination():
    from typer.testing import CliRunner

    from memos.cli import app

    out = CliRunner().invoke(app, ["bench", "serve", "--hold", "10", "--clients", "1,5"])
    assert out.exit_code == 2 and "--hold runs one combination" in out.output
