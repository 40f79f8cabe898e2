"""A worker process of the local encoder's pool (`memos.encoder_pool`): `python -m memos._encoder_worker CONFIG`
(the pool starts it with `encoder_pool.worker_command()`, which imports the parent's memos whatever the cwd).

It reads batches of token ids from stdin and writes their vectors to stdout, one frame each
(a 4-byte little-endian length, then a pickle), until stdin closes (its parent ended or closed
the pool). It is started as a fresh interpreter, not through multiprocessing: that would run the
parent's main script again in every worker (a user's script without a `__main__` guard would
ingest twice) and forking a process that runs LanceDB's threads is unsafe. BLAS gets its threads (one,
by default) through the environment the parent sets, before numpy loads.
"""

from __future__ import annotations

import json
import pickle
import sys
import traceback
from typing import IO, Any

__all__ = ["main", "read_frame", "write_frame"]


def read_frame(stream: IO[bytes]) -> Any:
    """The next framed pickle on `stream`; None at its end."""
    head = stream.read(4)
    if len(head) < 4:
        return None
    size = int.from_bytes(head, "little")
    body = stream.read(size)
    if len(body) < size:
        return None
    return pickle.loads(body)


def write_frame(stream: IO[bytes], value: Any) -> None:
    """Write `value` as one framed pickle and flush."""
    body = pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
    stream.write(len(body).to_bytes(4, "little") + body)
    stream.flush()


def main(config: dict[str, Any]) -> None:
    """Serve batches until stdin closes."""
    from .sentence_encoder import SentenceEncoder, blas_limit, random_weights

    seed = config.get("random_seed")
    weights = random_weights(config["model_dir"], seed) if seed is not None else None
    encoder = SentenceEncoder(config["model_dir"], batch_size=config["batch_size"], batch_tokens=config["batch_tokens"],
                              threads=config.get("threads", 1), weights=weights)
    work = encoder.work(config["batch_tokens"])
    source, sink = sys.stdin.buffer, sys.stdout.buffer
    with blas_limit(config.get("threads", 1)):
        while (batch := read_frame(source)) is not None:
            try:
                write_frame(sink, ("ok", encoder.encode_ids(batch, work)))
            except Exception:  # handed to the parent, which encodes the batch itself
                write_frame(sink, ("error", traceback.format_exc()))


if __name__ == "__main__":
    main(json.loads(sys.argv[1]))
