"""`memos serve` (the HTTP API and web view) and `memos keys` (its API keys, made offline)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated

import typer

from ._app import DbOption, app, console, embedder_choice, emit_json, fail, guarded, open_existing

keys_app = typer.Typer(help="API keys of `memos serve` (stored hashed in the store).", no_args_is_help=True)
app.add_typer(keys_app, name="keys")

# a str, not a Path: a Path would fold "s3://bucket" into "s3:/bucket"
UriOption = Annotated[str, typer.Option("--db", envvar="MEMOS_DB", help="The memos store (a directory or LanceDB URI such as s3://bucket/memos).")]
StorageOpt = Annotated[list[str] | None, typer.Option("--storage-option", help="KEY=VALUE passed to LanceDB (object storage), repeatable.")]


def _options(pairs: list[str] | None) -> dict[str, str] | None:
    if not pairs:
        return None
    out = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            fail(f"--storage-option {pair!r} is not KEY=VALUE")
        out[key] = value
    return out


@app.command()
@guarded
def serve(
    db: UriOption = "memos-data",
    host: Annotated[str, typer.Option(help="Interface to listen on (0.0.0.0 for every interface).")] = "127.0.0.1",
    port: Annotated[int, typer.Option(min=0, max=65535)] = 8077,
    admin_key: Annotated[str | None, typer.Option(envvar="MEMOS_ADMIN_KEY", help="Key for /admin and for approving vault reveals.")] = None,
    model: Annotated[str | None, typer.Option(help="Chat model for /v1/chat and the memory manager that extracts memories from "
                                                   "POST /v1/messages, e.g. openai:gpt-4o-mini (none: both off).")] = None,
    extract: Annotated[bool, typer.Option(help="With --model: extract memories from posted messages unless a request "
                                                "says \"extract\": false.")] = True,
    embedder: Annotated[str, typer.Option(help="'local', 'none' (full-text only) or a pydantic-ai embedding model.")] = "local",
    storage_option: StorageOpt = None,
    workers: Annotated[int, typer.Option(min=1, max=64, help="Server processes (spawned, sharing only the store).")] = 1,
    log_level: Annotated[str, typer.Option(help="uvicorn log level.")] = "warning",
    max_pending: Annotated[int, typer.Option(min=1, help="Adds, and searches, that may wait at once in a process; past that: 503 + Retry-After.")] = 256,
    encoder_threads: Annotated[int, typer.Option(min=0, max=256, envvar="MEMOS_ENCODER_THREADS",
                                                 help="BLAS threads of one call of the local encoder (0: the cores other "
                                                      "processes leave idle, as a script gets).")] = 1,
    store_threads: Annotated[int, typer.Option(min=0, max=256, envvar="MEMOS_STORE_THREADS",
                                               help="LanceDB's worker threads in each server process, at most the cores (0: "
                                                    "LanceDB's default, one per core; TOKIO_WORKER_THREADS, if set, wins).")] = 4,
) -> None:
    """Serve a store over HTTP: the /v1 API (OpenAPI at /openapi.json) and the web view at /ui."""
    try:
        import fastapi  # noqa: F401
        import uvicorn
    except ImportError:
        fail("memos serve needs its extra: pip install 'memos-memory[serve]'")
    if "://" not in str(db) and not Path(db).exists():
        fail(f"no memos store at {db} (create one with `memos init {db}`)")
    if admin_key and len(admin_key) < 16:
        fail("the admin key must be at least 16 characters")
    if model:  # a provider client not installed, an API key not set: one line now, not a failure per request
        from ._model import choose_model

        choose_model(model)
    options = _options(storage_option)
    _encoder_threads(encoder_threads)
    console.print(f"memos serve: {db} on http://{host}:{port} (web view /ui, API /v1, schema /openapi.json)"
                  + ("" if admin_key else "; no admin key: /admin and vault reveals are off"))
    if workers == 1:
        from memos.serve import ServeConfig, run

        run(ServeConfig(uri=str(db), embedder=embedder_choice(embedder), admin_key=admin_key, model=model, extract=extract,
                        storage_options=options, max_pending=max_pending, encoder_threads=encoder_threads,
                        store_threads=store_threads), host=host, port=port, log_level=log_level)
        return
    # several processes: uvicorn spawns each worker, which builds its app from the environment
    os.environ.update({"MEMOS_SERVE_DB": str(db), "MEMOS_SERVE_EMBEDDER": embedder, "MEMOS_SERVE_MODEL": model or "",
                       "MEMOS_SERVE_EXTRACT": "1" if extract else "0",
                       "MEMOS_SERVE_OPTIONS": __import__("json").dumps(options or {}),
                       "MEMOS_SERVE_MAX_PENDING": str(max_pending), "MEMOS_SERVE_ENCODER_THREADS": str(encoder_threads),
                       "MEMOS_SERVE_STORE_THREADS": str(store_threads)})
    if admin_key:
        os.environ["MEMOS_ADMIN_KEY"] = admin_key
    # a worker imports memos, LanceDB and the embedder before it answers the supervisor's ping:
    # uvicorn's 5 s default restarts slow starters forever on a busy machine
    uvicorn.run("memos.serve.workers:app_from_env", factory=True, host=host, port=port, workers=workers, log_level=log_level,
                timeout_worker_healthcheck=120)


def _encoder_threads(threads: int) -> None:
    """One BLAS thread an encode call by default: a server's parallelism is its concurrent requests
    (and its worker processes), each encoding apart, and a second BLAS thread in every call spins
    beside them. Side by side on 2 cores (docs/benchmarks.md, issue 37): 20 clients, server CPU an
    operation 31-35 -> 21-22 ms; one client, write / search p95 48-71 / 45-56 -> 39-43 / 39-43 ms.
    Set in the environment, which `memos.sentence_encoder.encode_threads` reads; a worker's app
    sets it again from `MEMOS_SERVE_ENCODER_THREADS` (0 leaves it to the encoder: the cores other
    processes leave idle)."""
    from memos.sentence_encoder import set_encode_threads

    set_encode_threads(threads)


@keys_app.command("create")
@guarded
def keys_create(
    db: UriOption = "memos-data",
    user: Annotated[str, typer.Option("--user", "-u", help="The user whose memory the key opens.")] = "default",
    agent: Annotated[str | None, typer.Option(help="Bind the key to one agent.")] = None,
    name: Annotated[str, typer.Option(help="A label for the key.")] = "",
    clearance: Annotated[str, typer.Option(help="none, low, medium or high: vault levels it may reveal (with approval).")] = "none",
    storage_option: StorageOpt = None,
) -> None:
    """Make an API key (prints the token once; the store keeps only its hash)."""
    from memos._sync import run_sync
    from memos.memory import MemoryOS
    from memos.serve.tenancy import Clearance, Tenants

    levels: dict[str, Clearance] = {"none": "none", "low": "low", "medium": "medium", "high": "high"}
    granted = levels.get(clearance)
    if granted is None:
        fail("--clearance must be none, low, medium or high")
    options = _options(storage_option)
    memory = MemoryOS.open_sync(db, embedder=None, storage_options=options) if options else open_existing(Path(db), embedder=None)
    token, key = run_sync(Tenants(memory).create(user, agent_id=agent, name=name, clearance=granted))
    console.print(f"key {key.key_id} for user {user!r}{f' agent {agent!r}' if agent else ''}; the token (shown once):")
    print(token)


@keys_app.command("list")
@guarded
def keys_list(db: DbOption = Path("memos-data"), user: Annotated[str | None, typer.Option("--user", "-u")] = None) -> None:
    """The keys of a store (ids, users, clearances; never the tokens)."""
    from memos._sync import run_sync
    from memos.serve.tenancy import Tenants

    emit_json([k.public() for k in run_sync(Tenants(open_existing(db, embedder=None)).list(user))])


@keys_app.command("revoke")
@guarded
def keys_revoke(key_id: Annotated[str, typer.Argument(help="The key id (from `memos keys list`).")], db: DbOption = Path("memos-data")) -> None:
    """Revoke a key."""
    from memos._sync import run_sync
    from memos.serve.tenancy import Tenants

    if not run_sync(Tenants(open_existing(db, embedder=None)).revoke(key_id)):
        fail(f"no key {key_id!r}")
    console.print(f"revoked {key_id}")
