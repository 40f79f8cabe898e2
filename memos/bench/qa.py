"""`memos bench qa`: answers to LOCOMO-style questions from memos' packed memories, judged by a model.

Every conversation's turns go in through `MemoryOS.ingest` (raw), and with a manager model
also through the memory manager (`memos.agents.manager`), a session's turns a batch at a time.
Each question is then answered by the answer model from `MemoryOS.search(question,
budget_tokens=B)` rendered as the prompt's memories (`prompts/bench_answer.j2`), and the answer
is graded against the dataset's by the judge model (`prompts/bench_judge.j2`, a structured
CORRECT / WRONG verdict). A judge whose output stays malformed after its retries, or an answer
model that returns nothing usable, is recorded as an error for that question; the run goes on.

Results go to a JSON-lines file as they come (`memos.bench.qa_results`): a rerun resumes, and
the store of ingested turns is kept beside it (`<out stem>.memos/`). Models are any pydantic-ai
model or model string, resolved only when the run starts.
"""

from __future__ import annotations

import hashlib
import json
import logging
import shutil
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field
from pydantic_ai import Agent
from pydantic_ai.exceptions import UnexpectedModelBehavior
from pydantic_ai.models import infer_model
from pydantic_ai.settings import ModelSettings

from memos import prompts
from memos.agents.manager import MemoryManager
from memos.exceptions import ConfigError
from memos.ingest import Message
from memos.memory import MemoryOS
from memos.retrieval.packing import render_hits
from memos.store.scope import Scope

from .locomo import Conversation, load_locomo
from .qa_results import ResultsFile, summarise

__all__ = ["CATEGORIES", "JudgeVerdict", "QAItem", "load_qa", "run_qa_bench", "store_path"]

log = logging.getLogger(__name__)

CATEGORIES = (1, 2, 3, 4)
"""The categories answered: LOCOMO's category 5 (adversarial) has no reference answer, only the
trap (`adversarial_answer`) a model should not give, so it is left out, as published J figures do."""

PROMPTS = ("bench_answer.j2", "bench_judge.j2")
SETTINGS = ModelSettings(temperature=0.0)


@dataclass(frozen=True)
class QAItem:
    """One question with its reference answer; `index` is its place in the sample's qa list."""

    sample_id: str
    index: int
    question: str
    answer: str
    category: int
    asked_on: str | None = None
    """The day the question is asked, as the dataset writes it (LongMemEval's `question_date`)."""

    @property
    def key(self) -> str:
        return f"{self.sample_id}#{self.index}"


class JudgeVerdict(BaseModel):
    """The judge's structured output for one answer."""

    reason: str = Field(description="One short sentence: why the answer is or is not the reference's fact.")
    verdict: Literal["CORRECT", "WRONG"]


def load_qa(path: str | Path, categories: Sequence[int] = CATEGORIES) -> tuple[list[Conversation], list[QAItem]]:
    """The conversations (their turns) and the answerable questions of `categories` of a LOCOMO-layout file."""
    if bad := sorted(set(categories) - set(CATEGORIES)):
        raise ConfigError(f"category {bad} cannot be judged: only categories 1-4 have reference answers "
                          f"(LOCOMO's category 5 gives only an adversarial answer)")
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"{path} does not exist or is not a file")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        items = [QAItem(sample["sample_id"], index, str(q["question"]), str(q["answer"]), int(q["category"]),
                        q.get("question_date"))
                 for sample in data for index, q in enumerate(sample["qa"])
                 if int(q["category"]) in categories and q.get("answer") is not None]
        return load_locomo(path), items
    except (ValueError, KeyError, TypeError) as exc:
        raise ConfigError(f"{path} is not a LOCOMO-layout file (a list of samples with sample_id, conversation and qa): "
                          f"{type(exc).__name__}: {exc}") from None


def store_path(out: Path) -> Path:
    """Where the run keeps its store of ingested turns: beside the results file."""
    return out.parent / f"{out.stem}.memos"


def _model_name(model: Any) -> str | None:
    if model is None or isinstance(model, str):
        return model
    return str(getattr(model, "model_name", type(model).__name__))


def _config(path: Path, model: Any, judge: Any, manager_model: Any, budget: int, embedder: Any,
            categories: Sequence[int], manager_batch: int) -> dict[str, Any]:
    templates = prompts.environment()
    loader = templates.loader
    assert loader is not None
    prompt_hash = hashlib.sha256("".join(loader.get_source(templates, n)[0] for n in PROMPTS).encode()).hexdigest()[:12]
    return {
        "dataset": f"{path.name}:{hashlib.sha256(path.read_bytes()).hexdigest()[:12]}",
        "model": _model_name(model), "judge": _model_name(judge), "manager_model": _model_name(manager_model),
        "manager_batch": manager_batch if manager_model is not None else None,
        "budget": budget, "embedder": embedder if isinstance(embedder, str | None) else getattr(embedder, "name", type(embedder).__name__),
        "categories": sorted(categories), "prompts": prompt_hash,
    }


def _sessions(messages: list[Message], size: int) -> list[list[str]]:
    """The turns' ids in batches for the manager: a session's turns (dia_id `D<session>:<turn>`), `size` at a time."""
    batches: list[list[str]] = []
    session = None
    for message in messages:
        current = str(message.id).split(":", 1)[0]
        if current != session or len(batches[-1]) >= size:
            batches.append([])
        session = current
        batches[-1].append(str(message.id))
    return batches


async def _ingest(mem: MemoryOS, conv: Conversation, manager_model: Any, batch: int) -> dict[str, Any]:
    scope = Scope(conv.sample_id)
    await mem.erase(scope)  # what an interrupted ingest of this conversation left
    started = time.perf_counter()
    episodes = await mem.ingest(scope, conv.messages)
    details: dict[str, Any] = {"turns": len(episodes)}
    if manager_model is not None:
        by_turn = {e.source_ids[0] if e.source_ids else e.id: e for e in episodes}
        manager = MemoryManager(mem, scope, manager_model)
        failed = written = 0
        batches = _sessions(conv.messages, batch)
        for ids in batches:
            try:
                report = await manager.run([by_turn[i] for i in ids if i in by_turn])
                written += len(report.written)
            except UnexpectedModelBehavior as exc:  # counted in the report: the turns stay in raw
                failed += 1
                log.warning("memory manager failed on %d turns of %s: %s", len(ids), conv.sample_id, exc)
        details |= {"manager_batches": len(batches), "manager_failed": failed, "manager_written": written}
    details["ingest_s"] = round(time.perf_counter() - started, 2)
    return details


def _usage(result: Any) -> dict[str, int]:
    usage = result.usage
    return {"requests": usage.requests, "input_tokens": usage.input_tokens or 0, "output_tokens": usage.output_tokens or 0}


async def _answer_one(mem: MemoryOS, item: QAItem, budget: int, answerer: Agent[None, str],
                      judge: Agent[None, JudgeVerdict]) -> dict[str, Any]:
    started = time.perf_counter()
    hits = await mem.search(item.question, Scope(item.sample_id), budget_tokens=budget)
    search_ms = (time.perf_counter() - started) * 1000
    memories = render_hits(hits)
    row: dict[str, Any] = {
        "key": item.key, "sample_id": item.sample_id, "index": item.index, "category": item.category,
        "question": item.question, "gold": item.answer, "context_tokens": mem.tokenizer.count(memories),
        "search_ms": round(search_ms, 1), "answer": None, "answer_error": None, "answer_ms": None, "answer_usage": None,
        "verdict": None, "reason": None, "judge_error": None, "judge_ms": None, "judge_usage": None,
    }
    started = time.perf_counter()
    try:
        answered = await answerer.run(prompts.render("bench_answer.j2", memories=memories, question=item.question,
                                                     asked_on=item.asked_on), model_settings=SETTINGS)
    except UnexpectedModelBehavior as exc:
        row |= {"answer_error": f"{type(exc).__name__}: {exc}", "answer_ms": round((time.perf_counter() - started) * 1000, 1)}
        return row
    row |= {"answer": answered.output.strip(), "answer_ms": round((time.perf_counter() - started) * 1000, 1),
            "answer_usage": _usage(answered)}
    started = time.perf_counter()
    try:
        judged = await judge.run(prompts.render("bench_judge.j2", question=item.question, gold=item.answer, answer=row["answer"],
                                                asked_on=item.asked_on), model_settings=SETTINGS)
        row |= {"verdict": judged.output.verdict, "reason": judged.output.reason, "judge_usage": _usage(judged)}
    except UnexpectedModelBehavior as exc:  # malformed after every retry: an error, never a verdict
        row["judge_error"] = f"{type(exc).__name__}: {exc}"
    row["judge_ms"] = round((time.perf_counter() - started) * 1000, 1)
    return row


async def run_qa_bench(
    dataset_path: str | Path,
    *,
    out: str | Path,
    model: Any,
    judge: Any,
    manager_model: Any = None,
    budget: int = 2000,
    embedder: Any = "local",
    samples: Sequence[str] | None = None,
    categories: Sequence[int] = CATEGORIES,
    max_questions: int | None = None,
    restart: bool = False,
    manager_batch: int = 10,
    judge_retries: int = 2,
    progress: Callable[[int, int], None] | None = None,
) -> dict[str, Any]:
    """Answer and judge the dataset's questions, appending to `out`; returns the report of every
    question `out` holds (`resumed`: how many an earlier run had answered).

    `model`, `judge`, `manager_model`: pydantic-ai models or model strings (`manager_model`
    None: raw ingest only). `restart`: drop `out` and its store first. A rerun with the same
    `out` and configuration answers only the questions not yet in it."""
    path, out = Path(dataset_path), Path(out)
    if not 1 <= budget <= 100_000:
        raise ConfigError(f"budget must be 1..100000 tokens, got {budget}")
    if manager_batch < 1 or judge_retries < 0:
        raise ConfigError("manager_batch must be at least 1 and judge_retries at least 0")
    conversations, items = load_qa(path, categories)
    if samples:
        known = {c.sample_id for c in conversations}
        if missing := sorted(set(samples) - known):
            raise ConfigError(f"no conversation {', '.join(missing)} in {path}; it has {', '.join(sorted(known))}")
        conversations = [c for c in conversations if c.sample_id in samples]
        items = [i for i in items if i.sample_id in samples]
    config = _config(path, model, judge, manager_model, budget, embedder, categories, manager_batch)
    # the model strings are resolved here, before anything is written: a missing key or provider fails first
    model, judge = infer_model(model), infer_model(judge)
    manager_model = infer_model(manager_model) if manager_model is not None else None
    answerer: Agent[None, str] = Agent(model, output_type=str, name="bench_answer")
    grader: Agent[None, JudgeVerdict] = Agent(judge, output_type=JudgeVerdict, retries=judge_retries, name="bench_judge")
    store = store_path(out)
    if restart and store.exists():
        shutil.rmtree(store)
    results = ResultsFile(out, config, restart=restart)
    pending = [i for i in items if i.key not in results.done][:max_questions]
    mem = await MemoryOS.open(store, embedder=embedder, model="gpt-4o")  # gpt-4o: tokens counted in o200k_base
    done = 0
    for conv in conversations:
        questions = [i for i in pending if i.sample_id == conv.sample_id]
        if not questions:
            continue
        if conv.sample_id not in results.ingested:
            results.add_ingested(conv.sample_id, **await _ingest(mem, conv, manager_model, manager_batch))
        for item in questions:
            results.add_answer(await _answer_one(mem, item, budget, answerer, grader))
            done += 1
            if progress:
                progress(done, len(pending))
    return {**summarise(results.records), "resumed": results.resumed, "answered_now": done,
            "remaining": len([i for i in items if i.key not in results.done]), "config": config, "out": str(out)}
