"""`memos bench ...`: benchmarks that write JSON reports."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer
from rich.progress import Progress

from memos._sync import run_sync

from ._app import app, console, emit_json, fail, guarded

bench_app = typer.Typer(help="Benchmarks (results as JSON).", no_args_is_help=True)
app.add_typer(bench_app, name="bench")


LOCOMO_SOURCE = ("LOCOMO (Maharana et al., ACL 2024; CC BY-NC 4.0, not shipped with memos): download data/locomo10.zip "
                 "from https://github.com/snap-research/locomo and unzip it")


@bench_app.command("retrieval")
@guarded
def retrieval(
    file: Annotated[Path, typer.Argument(help="The LOCOMO file (locomo10.json from github.com/snap-research/locomo).")],
    dataset: Annotated[str, typer.Option(help="Dataset format.")] = "locomo",
    samples: Annotated[list[str] | None, typer.Option("--sample", help="Only these conversations (sample_id, repeatable); "
                                                      "the README's figures: conv-26 conv-30 conv-41 conv-42.")] = None,
    json_out: Annotated[str, typer.Option("--json", help="Where to write the JSON report ('-' for stdout).")] = "-",
    max_questions: Annotated[int | None, typer.Option(help="Stop after this many questions (quick runs).")] = None,
    embedder: Annotated[str, typer.Option(help="'local' (default), 'none' (full-text only) or an embedder name.")] = "local",
    passages: Annotated[bool, typer.Option(help="Store long turns as passages too (memtypes.passage; opt-in).")] = False,
) -> None:
    """Evidence recall at token budgets 500/1000/2000/4000 through MemoryOS.search.

    The data: LOCOMO (Maharana et al., ACL 2024; CC BY-NC 4.0, not shipped with memos). Download
    data/locomo10.zip from https://github.com/snap-research/locomo, unzip it and pass locomo10.json."""
    from memos.bench.retrieval import run_retrieval_bench
    from memos.memtypes import Passage

    if dataset != "locomo":
        fail(f"unknown dataset format {dataset!r}; supported: locomo")
    if not file.exists():
        fail(f"{file} does not exist; the benchmark reads {LOCOMO_SOURCE}")
    with Progress(console=console) as progress:
        task = progress.add_task("questions", total=None)
        report = run_sync(run_retrieval_bench(
            file, max_questions=max_questions, samples=samples, embedder=None if embedder == "none" else embedder,
            progress=lambda n, total: progress.update(task, completed=n, total=total),
            open_kwargs={"types": [Passage]} if passages else None,
        ))
    emit_json(report, json_out)


@bench_app.command("qa")
@guarded
def qa(
    file: Annotated[Path, typer.Argument(help="A LOCOMO-layout file (locomo10.json, or LongMemEval in the same layout).")],
    model: Annotated[str, typer.Option(help="The answer model: any pydantic-ai model string ('openai-chat:NAME' with "
                                            "OPENAI_BASE_URL for a local OpenAI-compatible server; 'test': offline).")],
    judge: Annotated[str, typer.Option(help="The judge model (a pydantic-ai model string; it must return structured output).")],
    out: Annotated[Path, typer.Option(help="The results file (JSON lines); a rerun with the same file resumes. "
                                           "The store of ingested turns is kept beside it (<stem>.memos/).")] = Path("qa-results.jsonl"),
    manager_model: Annotated[str | None, typer.Option(help="Also ingest through the memory manager with this model "
                                                           "(default: raw turns only).")] = None,
    budget: Annotated[int, typer.Option(min=1, max=100_000, help="Tokens of packed memories given to the answer model.")] = 2000,
    samples: Annotated[list[str] | None, typer.Option("--sample", help="Only these conversations (sample_id, repeatable).")] = None,
    categories: Annotated[list[int] | None, typer.Option("--category", help="Only these categories (1-4, repeatable; "
                                                         "LOCOMO's 5 has no reference answer).")] = None,
    max_questions: Annotated[int | None, typer.Option(min=1, help="Answer at most this many more questions (quick runs).")] = None,
    embedder: Annotated[str, typer.Option(help="'local' (default), 'none' (full-text only) or an embedder name.")] = "local",
    manager_batch: Annotated[int, typer.Option(min=1, max=200, help="Turns per memory-manager request (within a session).")] = 10,
    judge_retries: Annotated[int, typer.Option(min=0, max=10, help="Retries of a judge whose output is malformed.")] = 2,
    restart: Annotated[bool, typer.Option("--restart", help="Drop the results file and its store and start over.")] = False,
    json_out: Annotated[str | None, typer.Option("--json", help="Where to write the JSON report ('-': stdout; "
                                                             "default: <out stem>.report.json).")] = None,
) -> None:
    """End-to-end QA: ingest, answer each question from memos' packed memories, judge (J by category).

    Prompts: prompts/bench_answer.j2 and bench_judge.j2 (docs/benchmarks.md). The models are
    resolved when the run starts; every answer is written as it comes, so an interrupted run
    resumes where it stopped."""
    import sys

    from rich.console import Console

    from memos.bench.qa import CATEGORIES, run_qa_bench

    if not file.exists():
        fail(f"{file} does not exist; the benchmark reads {LOCOMO_SOURCE}")
    with Progress(console=console) as progress:
        task = progress.add_task("questions", total=None)
        report = run_sync(run_qa_bench(
            file, out=out, model=model, judge=judge, manager_model=manager_model, budget=budget,
            embedder=None if embedder == "none" else embedder, samples=samples, categories=tuple(categories or CATEGORIES),
            max_questions=max_questions, restart=restart, manager_batch=manager_batch, judge_retries=judge_retries,
            progress=lambda n, total: progress.update(task, completed=n, total=total),
        ))
    (console if json_out == "-" else Console(file=sys.stdout)).print(qa_table(report))
    emit_json(report, out.parent / f"{out.stem}.report.json" if json_out is None else json_out)


def qa_table(report: dict[str, Any]) -> Any:
    """The report of `memos bench qa` as a table of J by category, then tokens, latency and errors."""
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    table = Table()
    for column in ("category", "n", "correct", "J"):
        table.add_column(column, justify="right")
    for category, row in report["by_category"].items():
        table.add_row(category, str(row["n"]), str(row["correct"]), f"{row['J']:.3f}")
    table.add_row("all", str(report["questions"]), str(report["correct"]), f"{report['J']:.3f}", style="bold")
    tokens, answer, judged, usage = report["context_tokens"], report["answer_ms"], report["judge_ms"], report["answer_usage"]
    notes = [
        f"packed context: mean {tokens['mean']:,} / median {tokens['median']:,} tokens a question",
        f"latency p50 / p95: answer {answer['p50']:,} / {answer['p95']:,} ms, judge {judged['p50']:,} / {judged['p95']:,} ms",
        f"answer model: {usage['input_tokens_per_question']:,} in / {usage['output_tokens_per_question']:,} out tokens a question"
        if usage else "answer model: no token usage reported",
        f"judge errors {report['judge_errors']}, answer errors {report['answer_errors']} (in n, not correct)",
        f"resumed {report['resumed']}, answered now {report['answered_now']}, remaining {report['remaining']}",
    ]
    title = Text(f"memos bench qa: J = {report['J']:.3f} on {report['questions']} questions", style="bold")
    return Group(title, table, Text("\n".join(notes)))


@bench_app.command("embedder")
def embedder_bench(
    dataset: Annotated[Path | None, typer.Option(help="A LOCOMO .json or messages (.jsonl / .json); default: synthetic turns.")] = None,
    device: Annotated[str, typer.Option(help="cpu (numpy), torch-cpu, cuda or cuda:N.")] = "cpu",
    workers: Annotated[str, typer.Option(help="Pool sizes to measure, comma-separated (cpu).")] = "1",
    threads: Annotated[str, typer.Option(help="BLAS threads per worker, comma-separated (cpu).")] = "1",
    gpu_batch: Annotated[str, typer.Option(help="Texts per GPU batch, comma-separated.")] = "256,1024",
    pool: Annotated[str, typer.Option(help="Workers as 'process' or 'thread'.")] = "process",
    passes: Annotated[int, typer.Option(min=1, max=10, help="Timed passes; the best is reported.")] = 2,
    limit: Annotated[int | None, typer.Option(min=1, help="Only the first N texts.")] = None,
    dtype: Annotated[str | None, typer.Option(help="torch-cpu: dtypes, e.g. float32,bfloat16 or auto.")] = None,
    model_dir: Annotated[Path | None, typer.Option(help="The model folder (default: the installed MiniLM weights).")] = None,
    random_weights: Annotated[bool, typer.Option("--random-weights", help="Random weights of the model's shapes.")] = False,
    json_out: Annotated[str, typer.Option("--json", help="Where to write the JSON report ('-' for stdout).")] = "-",
    remote_stub: Annotated[bool, typer.Option("--remote-stub", help="Measure memos' remote-embedder path against the loopback "
                                              "OpenAI-compatible stub instead (memos.bench.remote_embedder).")] = False,
    latency_ms: Annotated[float, typer.Option(min=0, help="--remote-stub: the stub answers a request after this long.")] = 20.0,
    batch: Annotated[int, typer.Option(min=1, help="--remote-stub: texts a request.")] = 64,
    rate_429: Annotated[float, typer.Option("--rate-429", min=0, max=1, help="--remote-stub: the fraction of requests refused with 429.")] = 0.1,
    retry_after: Annotated[float, typer.Option(min=0, help="--remote-stub: the 429's Retry-After, in seconds.")] = 1.0,
    in_flight: Annotated[int | None, typer.Option(min=1, help="--remote-stub: requests in flight (default: the embedder's).")] = None,
    dim: Annotated[int, typer.Option(min=1, help="--remote-stub: the vectors' dimension.")] = 384,
    call: Annotated[int | None, typer.Option(min=1, help="Texts a call (default: 1,024; --remote-stub: all in one call).")] = None,
    ingest: Annotated[bool, typer.Option(help="--remote-stub: also time MemoryOS.ingest into a temp LanceDB store.")] = True,
) -> None:
    """The local encoder alone on a dataset's texts: texts/s by workers, threads and device; or,
    with --remote-stub, a remote embedder through memos' request path and ingest
    (`python -m memos.bench.embedder` is the same, without the CLI's dependencies)."""
    from ..bench.embedder import main as bench_main

    if pool not in ("process", "thread"):
        fail(f"--pool is 'process' or 'thread', not {pool!r}")
    if dataset is not None and not dataset.exists():
        fail(f"{dataset} does not exist")
    argv = ["--device", device, "--workers", workers, "--threads", threads, "--gpu-batch", gpu_batch, "--pool", pool,
            "--passes", str(passes), "--json", json_out]
    argv += ["--dtype", dtype] if dtype else []
    argv += ["--dataset", str(dataset)] if dataset else []
    argv += ["--limit", str(limit)] if limit else []
    argv += ["--model-dir", str(model_dir)] if model_dir else []
    argv += ["--random-weights"] if random_weights else []
    argv += ["--call", str(call)] if call else []
    if remote_stub:
        argv += ["--remote-stub", "--latency-ms", str(latency_ms), "--batch", str(batch), "--rate-429", str(rate_429),
                 "--retry-after", str(retry_after), "--dim", str(dim)]
        argv += ["--in-flight", str(in_flight)] if in_flight else []
        argv += [] if ingest else ["--no-ingest"]
    bench_main(argv)


BENCH_EMBEDDERS = ("local", "hashed")
"""What can build a benchmark store (`memos.bench.scale.bench_embedder`)."""


def _check_bench_embedder(embedder: str) -> None:
    if embedder not in BENCH_EMBEDDERS:
        fail(f"unknown --embedder {embedder!r}; use {' or '.join(repr(e) for e in BENCH_EMBEDDERS)}")


@bench_app.command("scale")
def scale(
    records: Annotated[int, typer.Option(min=100, help="How many records to insert.")] = 100_000,
    json_out: Annotated[str, typer.Option("--json", help="Where to write the JSON report ('-' for stdout).")] = "-",
    queries: Annotated[int, typer.Option(min=20, help="Searches to time.")] = 200,
    path: Annotated[Path | None, typer.Option(help="Store directory (default: a temp dir; an existing one is reused).")] = None,
    embedder: Annotated[str, typer.Option(help="What builds the data: 'local' (the model) or 'hashed' (fast, for 1M runs).")] = "local",
    batch: Annotated[int, typer.Option(min=100, max=100_000, help="Records generated at a time; each scope's share is one `add` call.")] = 1000,
    query_embedder: Annotated[str | None, typer.Option(help="What embeds the queries (default: what built the data); 'local' keeps the model resident.")] = None,
) -> None:
    """Insert N records over the six stores, index, and time searches (query embedding excluded)."""
    from memos.bench.scale import run_scale_bench

    _check_bench_embedder(embedder)
    if query_embedder is not None:
        _check_bench_embedder(query_embedder)
    with Progress(console=console) as progress:
        task = progress.add_task("inserting", total=records)
        report = run_sync(run_scale_bench(records, path=path, queries=queries, embedder=embedder, batch=batch,
                                          query_embedder=query_embedder, progress=lambda n, total: progress.update(task, completed=n)))
    emit_json(report, json_out)


@bench_app.command("turn")
def turn(
    records: Annotated[int, typer.Option(min=100, help="Records in the store the conversation runs on.")] = 10_000,
    turns: Annotated[int, typer.Option(min=5, help="Steps to time.")] = 60,
    json_out: Annotated[str, typer.Option("--json", help="Where to write the JSON report ('-' for stdout).")] = "-",
    path: Annotated[Path | None, typer.Option(help="Store directory (default: a temp dir; an existing one is reused).")] = None,
    embedder: Annotated[str, typer.Option(help="What builds the store's data: 'local' or 'hashed' (then embedding is not timed).")] = "local",
    pause_ms: Annotated[float, typer.Option(min=0, max=60_000, help="Untimed pause standing for the model's call, and again for "
                                                                     "the user's reading, each turn (0: back to back).")] = 0,
) -> None:
    """One chat turn's overhead besides the model call: record, retrieve, compile, record the reply (ms)."""
    from memos.bench.turn import run_turn_bench

    _check_bench_embedder(embedder)
    with Progress(console=console) as progress:
        task = progress.add_task("building, then talking", total=None)
        report = run_sync(run_turn_bench(records, path=path, turns=turns, embedder=embedder, pause_ms=pause_ms,
                                         progress=lambda n, total: progress.update(task, completed=n, total=total)))
    emit_json(report, json_out)


def _counts(value: str, option: str, low: int, high: int) -> tuple[int, ...]:
    try:
        counts = tuple(int(v) for v in value.split(",") if v.strip())
    except ValueError:
        fail(f"{option} is a number or comma-separated numbers (e.g. 1,5,20), not {value!r}")
    if not counts or any(not low <= c <= high for c in counts):
        fail(f"{option} takes numbers from {low} to {high}, not {value!r}")
    return counts


@bench_app.command("serve")
def serve(
    clients: Annotated[str | None, typer.Option(help="Concurrent HTTP clients, or several comma-separated (1,5,20: a curve); default 20.")] = None,
    writes: Annotated[int, typer.Option(min=1, max=1000, help="Writes per client.")] = 10,
    searches: Annotated[int, typer.Option(min=0, max=1000, help="Searches per client.")] = 10,
    servers: Annotated[str | None, typer.Option(help="Server processes on the one store, or several comma-separated; default 1.")] = None,
    embedder: Annotated[str | None, typer.Option(help="The servers' embedder: 'local' or 'none', or both as 'local,none'; default local.")] = None,
    curve: Annotated[bool, typer.Option("--curve", help="Every combination of clients 1,5,20,50,100, embedders local,none and 1,2 "
                                                        "servers (an option given narrows it) and a table of them.")] = False,
    s3: Annotated[bool, typer.Option("--s3", help="Put the store on a loopback S3 server (moto) instead of a directory.")] = False,
    time_limit: Annotated[float | None, typer.Option(min=1, help="Stop starting operations after this many seconds of load "
                                                                 "(per run; default 600, in a curve 60).")] = None,
    load_processes: Annotated[int | None, typer.Option(min=1, max=32, help="Processes the clients run in (default: one per "
                                                                           "5 clients, at most a quarter of the cores).")] = None,
    hold: Annotated[float | None, typer.Option(min=5, max=3600, help="Hold the load this many seconds instead of a count of "
                                                                     "operations (--writes/--searches unused), reported by --window.")] = None,
    window: Annotated[float, typer.Option(min=1, max=600, help="Seconds of a held run per reported window.")] = 30.0,
    json_out: Annotated[str, typer.Option("--json", help="Where to write the JSON report ('-' for stdout).")] = "-",
) -> None:
    """Load-test `memos serve` on loopback: throughput, p50/p95/p99, errors by status, and every acknowledged
    write present exactly once; several values of --clients, --embedder or --servers (or --curve) run each combination.
    --hold keeps one combination's load up for a time and reports it window by window, as the store grows."""
    from memos.bench.serve import CURVE_CLIENTS, CURVE_EMBEDDERS, CURVE_SERVERS, run_serve_bench

    client_counts = _counts(clients, "--clients", 1, 200) if clients else CURVE_CLIENTS if curve else (20,)
    server_counts = _counts(servers, "--servers", 1, 8) if servers else CURVE_SERVERS if curve else (1,)
    embedders = tuple(e.strip() for e in embedder.split(",")) if embedder else CURVE_EMBEDDERS if curve else ("local",)
    if unknown := [e for e in embedders if e not in ("local", "none")]:
        fail(f"unknown --embedder {unknown[0]!r}; use 'local', 'none' or 'local,none'")
    combinations = len(client_counts) * len(server_counts) * len(embedders)
    if hold is not None and combinations > 1:
        fail("--hold runs one combination: give one value of --clients, --servers and --embedder, without --curve")
    if combinations > 1:
        _curve(client_counts, embedders, server_counts, writes, searches, s3, time_limit or 60.0, json_out, load_processes)
        return
    load = f"{hold:g} s of writes and searches" if hold is not None else f"({writes} writes + {searches} searches)"
    console.print(f"memos bench serve: {client_counts[0]} clients × {load}, {server_counts[0]} server(s)"
                  f"{' on loopback S3' if s3 else ''}, embedder {embedders[0]}")
    report = run_sync(run_serve_bench(client_counts[0], writes, searches, server_counts[0], embedder=embedders[0], s3=s3,
                                      time_limit=time_limit or 600.0, load_processes=load_processes, hold=hold, window=window))
    for row in report.get("windows", []):
        console.print(f"  t={row['t_s']:6.1f} s  {row['ops_s']:7.1f} ops/s  write p95 {row['write_ms']['p95']:7.1f} ms  "
                      f"search p95 {row['search_ms']['p95']:7.1f} ms  CPU {row.get('server_cpu_ms_per_op')} ms/op", highlight=False, soft_wrap=True)
    emit_json(report, json_out)
    if report["lost"] or report["duplicated"]:
        fail(f"{report['lost']} acknowledged writes lost, {report['duplicated']} duplicated")


def _curve(clients: tuple[int, ...], embedders: tuple[str, ...], servers: tuple[int, ...], writes: int, searches: int, s3: bool,
           time_limit: float, json_out: str, load_processes: int | None = None) -> None:
    """`memos bench serve` over several configurations: a line per run as it ends, the table, the JSON."""
    from rich.table import Table

    from memos.bench.serve import CURVE_COLUMNS, curve_table, run_serve_curve

    runs = len(clients) * len(embedders) * len(servers)
    console.print(f"memos bench serve: {runs} runs (clients {clients}, embedders {embedders}, servers {servers}), "
                  f"each {writes} writes + {searches} searches per client, at most {time_limit:g} s{' on loopback S3' if s3 else ''}")
    report = run_sync(run_serve_curve(clients, embedders, servers, writes=writes, searches=searches, s3=s3, time_limit=time_limit,
                                      load_processes=load_processes,
                                      progress=lambda row: console.print("  " + "  ".join(f"{k} {v}" for k, v in curve_table([row])[0].items()))))
    table = Table(*CURVE_COLUMNS, title="memos bench serve")
    for row in report["table"]:
        table.add_row(*(str(v) for v in row.values()))
    console.print(table)
    emit_json(report, json_out)
    if report["lost"] or report["duplicated"]:
        fail(f"{report['lost']} acknowledged writes lost, {report['duplicated']} duplicated")


@bench_app.command("faults")
def faults(
    seconds: Annotated[float, typer.Option(min=5, max=3600, help="How long the load runs.")] = 60.0,
    clients: Annotated[int, typer.Option(min=1, max=64, help="Concurrent HTTP client tasks (each one agent of one of 4 users).")] = 12,
    kills: Annotated[int, typer.Option(min=0, max=100, help="Times a server is SIGKILLed and restarted, spread over the run.")] = 5,
    job_every: Annotated[float, typer.Option(min=1, max=600, help="Seconds between consolidation runs (decay 1.5x, maintenance 2x).")] = 2.0,
    max_requests: Annotated[int, typer.Option(min=10, max=1_000_000, help="Stop after this many requests in all.")] = 20_000,
    embedder: Annotated[str, typer.Option(help="The servers' embedder: 'none' (full-text only) or 'local'.")] = "none",
    seed: Annotated[int, typer.Option(help="Seed of the clients' and the killer's choices.")] = 0,
    path: Annotated[Path | None, typer.Option(help="Keep the store and the server/worker logs here (default: a temp dir, removed).")] = None,
    json_out: Annotated[str, typer.Option("--json", help="Where to write the JSON report ('-' for stdout).")] = "-",
) -> None:
    """Two servers, concurrent writers, a consolidating worker and SIGKILLed servers on one store:
    every acknowledged write read back (0 lost, duplicated, resurrected, orphaned history, cross-agent)."""
    from memos.bench.faults import run_fault_bench

    if embedder not in ("none", "local"):
        fail(f"unknown --embedder {embedder!r}; use 'none' or 'local'")
    if path is not None and path.exists() and any(path.iterdir()):
        fail(f"{path} is not empty; give a new directory to keep the run's store in")
    console.print(f"memos bench faults: {clients} clients, 2 servers, {kills} kills, jobs every {job_every:g} s, {seconds:g} s")
    report = run_sync(run_fault_bench(seconds, clients=clients, kills=kills, job_every=job_every, max_requests=max_requests,
                                      embedder=embedder, seed=seed, path=path))
    emit_json(report, json_out)
    broken = {k: report[k] for k in FAULT_COUNTS if report[k]}
    if broken:
        fail("broken promises: " + ", ".join(f"{v} {k}" for k, v in broken.items()))


FAULT_COUNTS = ("lost", "duplicated", "resurrected", "orphaned_history", "without_history", "duplicate_history",
                "lost_updates", "cross_agent")
"""The counts of `memos bench faults` that must be 0."""
