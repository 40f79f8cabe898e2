"""The local encoder's forward pass in onnxruntime: the same weights, the same vectors, faster on
the short calls a server makes.

`memos.sentence_encoder` runs MiniLM in numpy, whose matrix products go to OpenBLAS. On the calls
a served store makes (a search's query, an add batch's few facts) the products have a few dozen
rows, where OpenBLAS runs far below its speed on long calls; onnxruntime's kernels do not drop as
much. Here the encoder's own arrays are written as one ONNX graph (embeddings, the layers with
the exact erf GELU, masked mean pooling, L2 norm), built when the encoder first runs (the large weights shared with it, not copied),
and run with one thread a call (a server's concurrent calls are its parallelism). Tokenising and
batching stay the numpy encoder's, so a text gets the same tokens and the same batch; the vectors
match it to float32 rounding (docs/benchmarks.md has the figures).

Where it runs: `MEMOS_ENCODER_DEVICE=onnx`, and `memos serve` on a CPU when `onnxruntime` and
`onnx` are installed (the `serve` extra brings them).
"""

from __future__ import annotations

import importlib.util
import math
import tempfile
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from .sentence_encoder import SentenceEncoder, padded

__all__ = ["OnnxSentenceEncoder", "graph", "onnx_installed"]


def onnx_installed() -> bool:
    """Whether onnxruntime and onnx (which writes the graph) can be imported."""
    return all(importlib.util.find_spec(name) is not None for name in ("onnxruntime", "onnx"))


class OnnxSentenceEncoder(SentenceEncoder):
    """A `SentenceEncoder` whose forward pass (`encode_ids`) runs in onnxruntime; it shares the
    weights, tokenizer and batching of the encoder it is made from."""

    def __init__(self, encoder: SentenceEncoder) -> None:  # the weights are `encoder`'s: no second load
        self.__dict__.update(encoder.__dict__)
        self._session: Any = None
        self._weights: list[Any] = []
        self._session_lock = threading.Lock()

    def session(self) -> Any:
        """The onnxruntime session (built once, on first use; its `run` is thread-safe)."""
        with self._session_lock:
            if self._session is None:
                import onnxruntime

                options = onnxruntime.SessionOptions()
                options.intra_op_num_threads = 1
                options.inter_op_num_threads = 1
                options.log_severity_level = 3  # warnings and up only
                model, shared = graph(self)
                self._weights = [onnxruntime.OrtValue.ortvalue_from_numpy(array) for array in shared.values()]  # kept alive
                for name, value in zip(shared, self._weights, strict=True):
                    options.add_initializer(name, value)
                # from a file, not bytes: a session made from bytes keeps them (the weights again) for its life
                with tempfile.TemporaryDirectory(prefix="memos-onnx-") as folder:
                    path = Path(folder) / "encoder.onnx"
                    path.write_bytes(model)
                    del model
                    self._session = onnxruntime.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
            return self._session

    def encode_ids(self, batch: Sequence[Sequence[int]], work: Any = None) -> np.ndarray:
        """The vectors of one batch of token-id lists (one run of the graph; `work`, the numpy encoder's arrays, is not used)."""
        ids, mask = padded(batch)
        return np.asarray(self.session().run(None, {"input_ids": ids, "attention_mask": mask})[0], dtype=np.float32)


def graph(encoder: SentenceEncoder) -> tuple[bytes, dict[str, np.ndarray]]:
    """The encoder's forward pass as a serialised ONNX model (opset 17), and its large weights by
    name: the encoder's own arrays, as stored (a dense layer's weight untransposed), which a session
    is given to use in place of the model's copies (`SessionOptions.add_initializer`), so the
    process holds the weights once."""
    from onnx import TensorProto, helper, numpy_helper

    weights: list[Any] = []
    nodes: list[Any] = []
    shared: dict[str, np.ndarray] = {}
    count = 0

    def name(kind: str) -> str:
        nonlocal count
        count += 1
        return f"{kind}_{count}"

    def const(array: Any) -> str:
        out = name("w")
        array = np.asarray(array)
        weights.append(numpy_helper.from_array(array, out))
        if array.size >= 4096 and array.flags.c_contiguous:
            shared[out] = array
        return out

    def op(kind: str, inputs: list[str], **attributes: Any) -> str:
        out = name(kind.lower())
        nodes.append(helper.make_node(kind, inputs, [out], **attributes))
        return out

    def norm(x: str, gamma: np.ndarray, beta: np.ndarray) -> str:
        return op("LayerNormalization", [x, const(gamma), const(beta)], axis=-1, epsilon=float(encoder.eps))

    def dense(x: str, weight: np.ndarray, bias: np.ndarray) -> str:
        """`x @ weight + bias` on (tokens, in) rows; a transposed view is given as stored, (out, in)."""
        if weight.flags.c_contiguous:
            return op("Gemm", [x, const(weight), const(bias)])
        return op("Gemm", [x, const(weight.T), const(bias)], transB=1)

    heads, head_dim, dim = encoder.heads, encoder.dim // encoder.heads, encoder.dim
    one = const(np.array(1.0, np.float32))
    words = op("Gather", [const(encoder.word), "input_ids"], axis=0)
    length = op("Shape", ["input_ids"], start=1, end=2)
    zero = const(np.array([0], np.int64))
    positions = op("Slice", [const(encoder.position), zero, length, zero])
    rows = const(np.array([-1, dim], np.int64))  # the hidden states as (tokens, dim) between layers
    x = op("Reshape", [norm(op("Add", [op("Add", [words, positions]), const(encoder.token_type)]), *encoder.emb_ln), rows])
    batch = op("Shape", ["input_ids"])  # (n, length)
    # a padded key gets the most negative float added before the softmax, as in BERT
    bias = op("Mul", [op("Sub", [one, "attention_mask"]), const(np.array(np.finfo(np.float32).min, np.float32))])
    bias = op("Unsqueeze", [bias, const(np.array([1, 2], np.int64))])
    scale = const(np.array(1.0 / math.sqrt(head_dim), np.float32))
    split = op("Concat", [batch, const(np.array([3, heads, head_dim], np.int64))], axis=0)
    for layer in encoder.layers:
        qkv = op("Reshape", [dense(x, layer.qkv_w, layer.qkv_b), split])
        qkv = op("Transpose", [qkv], perm=[2, 0, 3, 1, 4])  # (3, n, heads, length, head_dim)
        q, k, v = (op("Gather", [qkv, const(np.array(i, np.int64))], axis=0) for i in range(3))
        scores = op("Add", [op("Mul", [op("MatMul", [q, op("Transpose", [k], perm=[0, 1, 3, 2])]), scale]), bias])
        context = op("Transpose", [op("MatMul", [op("Softmax", [scores], axis=-1), v])], perm=[0, 2, 1, 3])
        context = op("Reshape", [context, rows])
        x = norm(op("Add", [dense(context, layer.out_w, layer.out_b), x]), layer.ln1_g, layer.ln1_b)
        up = dense(x, layer.up_w, layer.up_b)
        erf = op("Erf", [op("Div", [up, const(np.array(math.sqrt(2.0), np.float32))])])
        gelu = op("Mul", [op("Mul", [up, const(np.array(0.5, np.float32))]), op("Add", [one, erf])])
        x = norm(op("Add", [dense(gelu, layer.down_w, layer.down_b), x]), layer.ln2_g, layer.ln2_b)
    hidden = op("Reshape", [x, op("Concat", [batch, const(np.array([dim], np.int64))], axis=0)])
    mask = op("Unsqueeze", ["attention_mask", const(np.array([2], np.int64))])
    summed = op("ReduceSum", [op("Mul", [hidden, mask]), const(np.array([1], np.int64))], keepdims=0)
    counted = op("Max", [op("ReduceSum", ["attention_mask", const(np.array([1], np.int64))], keepdims=1),
                         const(np.array(1e-9, np.float32))])
    pooled = op("Div", [summed, counted])
    length2 = op("Max", [op("ReduceL2", [pooled], axes=[1], keepdims=1), const(np.array(1e-12, np.float32))])
    nodes.append(helper.make_node("Div", [pooled, length2], ["vectors"]))
    model = helper.make_model(
        helper.make_graph(nodes, "memos-sentence-encoder", [
            helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["n", "length"]),
            helper.make_tensor_value_info("attention_mask", TensorProto.FLOAT, ["n", "length"]),
        ], [helper.make_tensor_value_info("vectors", TensorProto.FLOAT, ["n", encoder.dim])], weights),
        opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return bytes(model.SerializeToString()), shared
