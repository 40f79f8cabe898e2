"""The same store on S3-compatible object storage (moto's server on loopback), shared by processes."""

from __future__ import annotations

import socket
import subprocess
import sys
import textwrap

import boto3
import pytest
from moto.server import ThreadedMotoServer

from memos import MemoryOS, Scope
from memos.memtypes import Fact

WRITER = textwrap.dedent('''
    import json, os, sys
    os.environ["LANCE_LOG"] = "error"
    from memos import MemoryOS, Scope
    from memos.memtypes import Fact
    uri, options, name, n = sys.argv[1], json.loads(sys.argv[2]), sys.argv[3], int(sys.argv[4])
    mem = MemoryOS.open_sync(uri, embedder=None, storage_options=options)
    for i in range(n):
        mem.add_sync(Scope("team"), Fact(subject=name, summary=f"{name} note {i}", tags=[name]))
    print("done", flush=True)
''')


@pytest.fixture
def s3():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port)
    server.start()
    endpoint = f"http://127.0.0.1:{port}"
    boto3.client("s3", endpoint_url=endpoint, aws_access_key_id="test", aws_secret_access_key="test",
                 region_name="us-east-1").create_bucket(Bucket="memos")
    yield {"aws_endpoint": endpoint, "aws_access_key_id": "test", "aws_secret_access_key": "test",
           "aws_region": "us-east-1", "allow_http": "true"}
    server.stop()


def test_two_writer_processes_and_a_reader_share_a_store_on_s3(s3, tmp_path):
    import json

    uri = "s3://memos/team-db"
    first = MemoryOS.open_sync(uri, embedder=None, storage_options=s3)  # creates the tables
    first.add_sync(Scope("team"), Fact(subject="setup", summary="store created"))
    script = tmp_path / "writer.py"
    script.write_text(WRITER)
    procs = [subprocess.Popen([sys.executable, str(script), uri, json.dumps(s3), name, "25"], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE) for name in ("ana", "ben")]
    for proc in procs:
        out, err = proc.communicate(timeout=240)
        assert proc.returncode == 0 and b"done" in out, err.decode()[-2000:]
    reader = MemoryOS.open_sync(uri, embedder=None, storage_options=s3)
    facts = reader.list_sync(Scope("team"), "semantic", limit=None)
    summaries = [f.summary for f in facts]
    for name in ("ana", "ben"):
        assert sorted(s for s in summaries if s.startswith(name)) == sorted(f"{name} note {i}" for i in range(25))
    assert len(summaries) == len(set(summaries)) == 51
    assert [h.record.summary for h in reader.search_sync("ben note 7", Scope("team"), k=1)] == ["ben note 7"]
    assert len(reader.history_sync(Scope("team"))) == 51
