"""`memos bench embedder`: the local encoder alone, texts/s by workers, BLAS threads and device.

    python -m memos.bench.embedder [--dataset locomo.json] [--workers 1,2,4] [--threads 1]
                                   [--device cpu|cuda|cuda:N|torch-cpu] [--random-weights] [--passes 2]

Encodes a dataset's texts (a LOCOMO file's turns as ingest indexes them, a JSONL of messages, or
synthetic turns) in calls of `--call` texts, as ingest hands them over, and reports the best of
`--passes` passes for each configuration, with how far its vectors are from the first one's.
It imports nothing of the storage layer (no LanceDB, pyarrow or pydantic), so it runs from a
checkout where only numpy, tokenizers and threadpoolctl (and torch, for a GPU) are installed.
Where the MiniLM weights are not installed, `--export-model DIR` (run where they are) writes a
folder with the tokenizer, the config and the weights' shapes only, and `--model-dir DIR
--random-weights` encodes with random weights of those shapes (the same FLOPs).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

__all__ = ["dataset_texts", "export_model", "main", "run_embedder_bench"]

_WORDS = ("memory agent lisbon peanut allergy meeting budget report deploy script cat garden trip "
          "doctor invoice sister tea coffee train delayed launch quarter contract dentist puppy "
          "rain interview vegetarian birthday router password kitchen recipe running book").split()
_SEED = 38


def dataset_texts(path: Path | None, limit: int | None = None) -> list[str]:
    """The texts ingest would embed: a LOCOMO file's turns ("speaker: text caption"), a JSONL or
    JSON list of messages, or (no path) 2,000 synthetic turns (`limit` of them if more)."""
    if path is None:
        rng = random.Random(_SEED)
        texts = [" ".join(rng.choice(_WORDS) for _ in range(rng.randint(5, 40))).capitalize() + "."
                 for _ in range(max(2000, limit or 0))]
    elif path.suffix == ".jsonl":
        rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
        texts = [_message_text(r) for r in rows]
    else:
        data = json.loads(path.read_text(encoding="utf-8"))
        texts = []
        for item in data:
            conversation = item.get("conversation") if isinstance(item, dict) else None
            if conversation is None:
                texts.append(_message_text(item))
                continue
            n = 1
            while f"session_{n}" in conversation:
                texts += [_message_text(turn) for turn in conversation[f"session_{n}"]]
                n += 1
    return texts[:limit] if limit else texts


def _message_text(row: dict[str, Any]) -> str:
    actor = row.get("speaker") or row.get("actor") or row.get("role") or ""
    text = row.get("text") or row.get("content") or ""
    head = f"{actor}: {text}" if actor else text
    return f"{head} {row.get('blip_caption') or row.get('details') or ''}".strip()  # Episode.index_text


def export_model(model_dir: Path, dest: Path) -> Path:
    """Copy what a random-weights run needs from `model_dir` to `dest`: the configs, the
    tokenizer and the weights' shapes (`model.shapes.json`, the safetensors header), not the weights."""
    from memos.sentence_encoder import SHAPES_FILE, safetensors_header

    dest.mkdir(parents=True, exist_ok=True)
    for name in ("config.json", "sentence_bert_config.json", "tokenizer.json"):
        if (model_dir / name).exists():
            shutil.copyfile(model_dir / name, dest / name)
    (dest / SHAPES_FILE).write_text(json.dumps(safetensors_header(model_dir / "model.safetensors")[0]))
    return dest


def run_embedder_bench(texts: Sequence[str], model_dir: Path, *, device: str = "cpu", workers: Sequence[int] = (1,),
                       threads: Sequence[int] = (1,), gpu_batches: Sequence[int] = (256, 1024), passes: int = 2,
                       call: int = 1024, kind: str = "process", random_weights: bool = False,
                       dtypes: Sequence[str] | None = None,
                       progress: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Texts/s of each configuration (the best of `passes`), and its vectors against the first's."""
    import numpy as np

    from memos.sentence_encoder import SentenceEncoder
    from memos.sentence_encoder import random_weights as make_random

    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    seed = _SEED if random_weights else None
    weights = make_random(model_dir, seed) if seed is not None else None
    rows: list[dict[str, Any]] = []
    first: list[Any] = []

    def measure(label: dict[str, Any], encode: Callable[[Sequence[str]], Any]) -> None:
        encode(texts[: min(len(texts), 256)])  # warm-up: workers started, weights paged in, kernels chosen
        best, vectors = float("inf"), None
        for _ in range(passes):
            start = time.perf_counter()
            vectors = np.concatenate([encode(texts[i : i + call]) for i in range(0, len(texts), call)])
            best = min(best, time.perf_counter() - start)
        if not first:
            first.append(vectors)
        cos = (vectors * first[0]).sum(axis=1)
        row = {**label, "texts_per_s": round(len(texts) / best, 1), "best_s": round(best, 3),
               "max_abs_diff": float(np.abs(vectors - first[0]).max()), "min_cosine": float(cos.min())}
        rows.append(row)
        if progress:
            progress(json.dumps(row))

    if device in ("cpu", "torch-cpu") or device == "numpy":
        for w in workers:
            for t in threads:
                encoder = SentenceEncoder(model_dir, threads=t, weights=weights)
                if device == "torch-cpu":
                    import torch

                    from memos.torch_encoder import TorchSentenceEncoder

                    torch.set_num_threads(t)
                    for name in dtypes or ["float32"]:
                        measure({"device": "torch-cpu", "workers": 1, "threads": t, "dtype": name},
                                TorchSentenceEncoder(encoder, "cpu", dtype=name).encode)
                    continue
                if w <= 1:
                    measure({"device": "cpu", "workers": 1, "threads": t}, encoder.encode)
                    continue
                from memos.encoder_pool import EncoderPool

                pool = EncoderPool(encoder, model_dir, w, kind="thread" if kind == "thread" else "process", threads=t,
                                   random_seed=seed)
                try:
                    measure({"device": "cpu", "workers": w, "threads": t, "pool": kind}, pool.encode)
                finally:
                    pool.close()
    else:
        from memos.torch_encoder import TorchSentenceEncoder

        encoder = SentenceEncoder(model_dir, weights=weights)
        measure({"device": "cpu", "workers": 1, "threads": threads[0], "reference": True}, encoder.encode)
        for size in gpu_batches:
            gpu = TorchSentenceEncoder(encoder, device, batch_size=size, batch_tokens=size * 128)
            measure({"device": device, "batch": size, "dtype": str(gpu.dtype).removeprefix("torch.")}, gpu.encode)
    lengths = [len(ids) for ids in SentenceEncoder(model_dir, weights=weights).tokenize(texts)]
    return {"texts": len(texts), "mean_tokens": round(sum(lengths) / max(1, len(lengths)), 1), "call": call,
            "passes": passes, "random_weights": random_weights, "cores": os.cpu_count(), "model_dir": str(model_dir),
            "rows": rows}


def _names(value: str) -> list[str]:
    names = [v.strip() for v in value.split(",") if v.strip()]
    if "auto" in names:
        from memos.torch_encoder import cpu_dtype_name

        names = [cpu_dtype_name() if n == "auto" else n for n in names]
    return names


def _ints(value: str) -> list[int]:
    return [int(v) for v in value.split(",") if v.strip()]


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", type=Path, help="A LOCOMO .json, or messages (.jsonl / .json); default: synthetic turns.")
    parser.add_argument("--limit", type=int, help="Only the first N texts.")
    parser.add_argument("--device", default="cpu", help="cpu (numpy), torch-cpu, cuda or cuda:N.")
    parser.add_argument("--workers", type=_ints, default=[1], help="Pool sizes to measure, e.g. 1,2,4,8,16 (cpu).")
    parser.add_argument("--threads", type=_ints, default=[1], help="BLAS threads per worker, e.g. 1,2 (cpu).")
    parser.add_argument("--gpu-batch", type=_ints, default=[256, 1024], help="Texts per GPU batch to measure.")
    parser.add_argument("--dtype", type=_names, default=None,
                        help="torch-cpu: dtypes to measure, e.g. float32,bfloat16 ('auto': bfloat16 where the CPU has AMX).")
    parser.add_argument("--pool", default="process", choices=("process", "thread"), help="Workers as processes or threads.")
    parser.add_argument("--passes", type=int, default=2, help="Timed passes; the best is reported.")
    parser.add_argument("--call", type=int, help="Texts an encode call (default 1,024, as ingest hands over; "
                        "--remote-stub: all in one call).")
    parser.add_argument("--model-dir", type=Path, help="The model folder (default: the installed MiniLM weights).")
    parser.add_argument("--random-weights", action="store_true", help="Random weights of the model's shapes.")
    parser.add_argument("--export-model", type=Path, help="Write a weights-free model folder here (for --random-weights elsewhere) and stop.")
    parser.add_argument("--json", dest="json_out", default="-", help="Where to write the report ('-': stdout).")
    remote = parser.add_argument_group("a remote embedder against the loopback stub (memos.bench.remote_embedder)")
    remote.add_argument("--remote-stub", action="store_true", help="Measure memos' remote-embedder path, not the local encoder.")
    remote.add_argument("--latency-ms", type=float, default=20.0, help="The stub answers each request after this long.")
    remote.add_argument("--batch", type=int, default=64, help="Texts a request.")
    remote.add_argument("--rate-429", type=float, default=0.1, help="The fraction of requests the stub refuses with 429.")
    remote.add_argument("--retry-after", type=float, default=1.0, help="The 429's Retry-After, in seconds.")
    remote.add_argument("--retry-after-ms", type=int, help="Also send retry-after-ms (OpenAI's header; it wins).")
    remote.add_argument("--in-flight", type=int, help="Requests in flight at once (default: RequestPolicy's).")
    remote.add_argument("--dim", type=int, default=384, help="The stub's vector dimension.")
    remote.add_argument("--floats-only", action="store_true", help="The stub ignores encoding_format: base64.")
    remote.add_argument("--no-ingest", action="store_true", help="Skip the MemoryOS.ingest phase.")
    args = parser.parse_args(argv)
    if args.remote_stub:
        _remote(args)
        return
    if args.model_dir is None:
        from memos.embeddings import local_model_dir

        args.model_dir = local_model_dir()
    if args.export_model:
        print(export_model(args.model_dir, args.export_model))
        return
    texts = dataset_texts(args.dataset, args.limit)
    args.call = args.call or 1024
    report = run_embedder_bench(texts, args.model_dir, device=args.device, workers=args.workers, threads=args.threads,
                                gpu_batches=args.gpu_batch, passes=args.passes, call=args.call, kind=args.pool, dtypes=args.dtype,
                                random_weights=args.random_weights, progress=lambda line: print(line, file=sys.stderr))
    _write_report(report, args.json_out)


def _write_report(report: dict[str, Any], json_out: str) -> None:
    """The report as indented JSON, to stdout ('-') or to the file `json_out`."""
    text = json.dumps(report, indent=2)
    if json_out == "-":
        print(text)
    else:
        Path(json_out).write_text(text + "\n")


def _remote(args: argparse.Namespace) -> None:
    from memos.bench.remote_embedder import StubSettings, run_remote_bench

    stub = StubSettings(latency_ms=args.latency_ms, rate_429=args.rate_429, retry_after=args.retry_after,
                        retry_after_ms=args.retry_after_ms, dim=args.dim, floats_only=args.floats_only)
    report = run_remote_bench(dataset_texts(args.dataset, args.limit), args.dataset, limit=args.limit, stub=stub,
                              batch=args.batch, in_flight=args.in_flight, call=args.call or 0, ingest=not args.no_ingest)
    _write_report(report, args.json_out)


if __name__ == "__main__":
    main()
