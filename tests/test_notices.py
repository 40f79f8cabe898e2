"""Notices one process of a local store posts for its others (`memos.store.lancedb.notices`): the
web view's events across server workers. Two boards on one folder stand for two processes."""

from __future__ import annotations

import os
import time

from memos.store.lancedb import notices
from memos.store.lancedb.notices import NOTICES_DIR, Notices


def test_a_reader_gets_what_the_others_posted_since_it_last_read_in_order_and_whole_lines_only(tmp_path):
    writer, reader = Notices(tmp_path), Notices(tmp_path)
    writer.post({"n": 0})  # before the reader started: not its business
    assert reader.read() == []
    for n in range(1, 4):
        writer.post({"n": n, "text": "写了 ✓"})
    assert reader.read() == [{"n": n, "text": "写了 ✓"} for n in range(1, 4)]
    assert reader.read() == []
    [own] = os.listdir(tmp_path / NOTICES_DIR)
    with open(tmp_path / NOTICES_DIR / own, "ab") as file:  # a line half written
        file.write(b'{"n": 4')
        file.flush()
        assert reader.read() == []
        file.write(b"}\n")
    assert reader.read() == [{"n": 4}]
    assert writer.read() == [] and (writer.post({"n": 5}), writer.read()) == (None, [])  # its own are not read back
    reader.stop()
    writer.post({"n": 6})
    assert reader.read() == []  # stopped: it starts again at the present


def test_a_full_file_goes_on_under_a_new_name_and_is_removed_once_readers_had_time(tmp_path, monkeypatch):
    monkeypatch.setattr(notices, "ROTATE_BYTES", 30)  # three notices a file
    writer, reader = Notices(tmp_path), Notices(tmp_path)
    reader.read()
    got = []
    for n in range(40):
        writer.post({"n": n})
        if n % 7 == 6:  # behind by several files at times
            got += reader.read()
    got += reader.read()
    assert [g["n"] for g in got] == list(range(40))
    assert len(os.listdir(tmp_path / NOTICES_DIR)) > 5
    monkeypatch.setattr(notices, "KEEP_SECONDS", 0.0)
    writer.post({"n": 40})
    assert len(os.listdir(tmp_path / NOTICES_DIR)) == 1
    assert reader.read() == [{"n": 40}]


def test_a_stale_file_is_removed_and_its_writer_starts_a_new_one(tmp_path, monkeypatch):
    monkeypatch.setattr(notices, "QUIET_SECONDS", 0.0)  # (a writer quiet for a second looks)
    quiet, reader = Notices(tmp_path), Notices(tmp_path)
    quiet.post({"n": 1})
    [name] = os.listdir(tmp_path / NOTICES_DIR)
    hours_ago = time.time() - 2 * notices.STALE_SECONDS
    os.utime(tmp_path / NOTICES_DIR / name, (hours_ago, hours_ago))
    assert reader.read() == [] and os.listdir(tmp_path / NOTICES_DIR) == []
    quiet.post({"n": 2})
    assert reader.read() == [{"n": 2}]


def test_files_of_processes_long_gone_are_removed_by_a_writer_too(tmp_path):
    """A store no process reads notices from (one process at a time, as a command line uses it)
    keeps no file of every process that ever wrote to it."""
    gone = Notices(tmp_path, "changes")
    gone.post({"n": 1})
    [name] = os.listdir(tmp_path / "changes")
    hours_ago = time.time() - 2 * notices.STALE_SECONDS
    os.utime(tmp_path / "changes" / name, (hours_ago, hours_ago))
    recent = Notices(tmp_path, "changes")
    recent.post({"n": 2})
    later = Notices(tmp_path, "changes")
    later.post({"n": 3})
    assert name not in os.listdir(tmp_path / "changes") and len(os.listdir(tmp_path / "changes")) == 2
    assert not (tmp_path / NOTICES_DIR).exists()  # another kind of notice, another folder


def test_object_storage_has_no_notices():
    board = Notices(None)
    board.post({"n": 1})
    assert board.read() == [] and board.read() == []


def test_notices_are_kept_minutes_and_a_closing_process_removes_its_own(tmp_path, monkeypatch):
    monkeypatch.setattr(notices, "ROTATE_SECONDS", 0.0)  # every notice in a file of its own
    writer, reader = Notices(tmp_path), Notices(tmp_path)
    reader.read()
    for n in range(3):
        writer.post({"n": n})
    assert len(os.listdir(tmp_path / NOTICES_DIR)) == 3 and [g["n"] for g in reader.read()] == [0, 1, 2]
    writer.close()
    assert os.listdir(tmp_path / NOTICES_DIR) == []


def test_a_pseudonym_is_one_per_user_and_store_and_names_no_one(tmp_path):
    (tmp_path / "a").mkdir(), (tmp_path / "b").mkdir()
    one, other = Notices(tmp_path / "a"), Notices(tmp_path / "a")  # two processes of one store
    assert one.pseudonym("alice") == other.pseudonym("alice") != one.pseudonym("bob")
    assert "alice" not in one.pseudonym("alice") and Notices(tmp_path / "b").pseudonym("alice") != one.pseudonym("alice")
