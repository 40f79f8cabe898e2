"""Startup: commands that need no vectors never load the embedder's weights.

Run in fresh interpreters, since the test session itself has everything imported. What is
checked is what a user sees (output, exit codes) and which modules a command had to load;
how long it takes is measured in the README's benchmarks, not here.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path


def _python(code: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=cwd, check=True)


def test_read_only_commands_never_load_the_weights_and_print_no_warnings(tmp_path):
    db = tmp_path / "db"
    init = _python(f"from memos.cli import app\ntry:\n    app(['init', {str(db)!r}, '--user', 'sam'])\nexcept SystemExit:\n    pass\n",
                   tmp_path)  # init embeds its default core blocks: the weights load there, rightly
    assert " WARN " not in init.stderr, init.stderr  # a new store's tables are made without LanceDB's log lines
    code = (
        "import sys\nfrom memos.cli import app\n"
        "for args in " + repr([
            ["inspect", "stores", "--db", str(db)],
            ["export", str(tmp_path / "out.jsonl"), "--db", str(db), "--user", "sam"],
            ["jobs", "list", "--db", str(db)],
        ]) + ":\n"
        "    try:\n        app(args)\n    except SystemExit as exc:\n        assert not exc.code, (args, exc.code)\n"
        "import memos.embeddings as e\n"
        "print('WEIGHTS', e._local is not None and e._local.embedder._encoder is not None)\n"
        "print('LOADED', sorted(m for m in ('torch', 'transformers', 'tokenizers') if m in sys.modules))\n"
    )
    out = _python(code, tmp_path)
    assert "WEIGHTS False" in out.stdout and "LOADED []" in out.stdout
    for noise in ("Loading weights", "%|", "full-text-only", "no embedder", "Traceback"):
        assert noise not in out.stderr, out.stderr
    assert (tmp_path / "out.jsonl").exists()


def test_job_kinds_in_the_help_are_the_schedulers():
    from memos.cli.jobs import KINDS_HELP
    from memos.jobs.scheduler import JOB_KINDS

    assert KINDS_HELP == f"One of: {', '.join(JOB_KINDS)}."


def test_help_and_the_package_import_load_no_storage_engine(tmp_path):
    """`import memos` and `memos --help` load neither LanceDB nor the embedder: the facade's
    names load on first use (the package's module __getattr__), the CLI's commands import
    what they need when they run."""
    code = (
        "import sys\nimport memos\nfrom memos.cli import app\n"
        "try:\n    app(['--help'])\nexcept SystemExit as exc:\n    assert not exc.code, exc.code\n"
        "print('LOADED', sorted(m for m in ('lancedb', 'lance', 'tiktoken', 'memos.memory', 'memos.store.lancedb.storage') if m in sys.modules))\n"
        "from memos import MemoryOS\n"
        "print('LATER', MemoryOS.__module__, 'lancedb' in sys.modules)\n"
    )
    out = _python(code, tmp_path)
    assert "LOADED []" in out.stdout, out.stdout
    assert "LATER memos.memory True" in out.stdout


def test_lancedb_opens_stores_without_building_its_rest_client(tmp_path):
    """LanceDB's REST namespace client (most of its import time) is deferred: a store opens, is
    written and searched without it, and the client still loads the moment a name is asked of it."""
    code = (
        "from memos import MemoryOS, Scope\nfrom memos.memtypes import Fact\nfrom memos.store.lancedb._lance import rest_client_loaded\n"
        f"mem = MemoryOS.open_sync({str(tmp_path / 'db')!r}, embedder=None)\n"
        "mem.add_sync(Scope('ann'), Fact(subject='ann', summary='ann keeps bees'))\n"
        "print('HITS', len(mem.search_sync('bees', Scope('ann'), k=3)), 'CLIENT', rest_client_loaded())\n"
        "import lance_namespace_urllib3_client as client\n"
        "print('LATER', client.ApiClient.__name__, rest_client_loaded())\n"
    )
    out = _python(code, tmp_path)
    assert "HITS 1 CLIENT False" in out.stdout, out.stdout + out.stderr
    assert "LATER ApiClient True" in out.stdout


def test_lancedb_log_lines_are_quiet_by_default(tmp_path):
    """LanceDB reads LANCEDB_LOG (memos set only LANCE_LOG, which it ignores: its WARN lines about
    retried compactions reached users' stderr). Importing memos quiets it, as LANCE_LOG says."""
    def run(first_import: str, db: Path) -> str:
        code = (f"import asyncio, {first_import}lancedb, pyarrow as pa\n"
                "async def main():\n"
                f"    db = await lancedb.connect_async({str(db)!r})\n"
                "    await db.create_table('t', pa.table({'a': [1]}), mode='overwrite')\n"  # a new table: LanceDB WARNs
                "asyncio.run(main())\n")
        return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=tmp_path,
                              env={"PATH": "/usr/bin:/bin"}, check=True).stderr
    assert " WARN " in run("", tmp_path / "a")  # the line is there without memos (so the check below can fail)
    quiet = run("memos, ", tmp_path / "b")
    assert " WARN " not in quiet, quiet
