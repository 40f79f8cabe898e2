"""`memos bench qa`: answers from packed memories, judged; resumable; scripted models only (no network)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from pydantic_ai.messages import ModelResponse, TextPart, ToolCallPart, UserPromptPart
from pydantic_ai.models.function import AgentInfo, FunctionModel
from typer.testing import CliRunner

from memos import MemoryOS, Scope
from memos.bench.qa import run_qa_bench, store_path
from memos.cli import app
from memos.exceptions import ConfigError

runner = CliRunner()


def turn(dia_id: str, speaker: str, text: str) -> dict:
    return {"dia_id": dia_id, "speaker": speaker, "text": text}


DATA = [
    {"sample_id": "conv-a", "conversation": {
        "speaker_a": "Caroline", "speaker_b": "Mel",
        "session_1_date_time": "1:56 pm on 8 May, 2023",
        "session_1": [turn("D1:1", "Caroline", "I adopted a beagle puppy yesterday and named him Biscuit."),
                      turn("D1:2", "Mel", "Biscuit is a lovely name! Where did you find him?"),
                      turn("D1:3", "Caroline", "At the shelter on Harbour Street, they had three beagles.")],
        "session_2_date_time": "10:00 am on 20 June, 2023",
        "session_2": [turn("D2:1", "Mel", "我的猫叫团子，它最喜欢晒太阳。"),
                      turn("D2:2", "Caroline", "团子这个名字真可爱！"),
                      turn("D2:3", "Mel", "Also, I am moving to Lisbon in September for my new job.")],
        "session_3_date_time": "9:00 am on 1 July, 2023"},  # a date key past the last session, as in the released files
     "qa": [{"question": "What is the name of Caroline's dog?", "answer": "Biscuit", "evidence": ["D1:1"], "category": 4},
            {"question": "When did Caroline adopt her puppy?", "answer": "7 May 2023", "evidence": ["D1:1"], "category": 2},
            {"question": "What did Caroline realize after her charity race?", "evidence": ["D1:3"], "category": 5,
             "adversarial_answer": "self-care is important"},
            {"question": "What did Mel say about the weather?", "answer": "Not mentioned in the conversation",  # a category 5
             "evidence": ["D2:1"], "category": 5, "adversarial_answer": "sunny"},  # item with an answer, as two LOCOMO ones
            {"question": "Mel的猫叫什么名字？", "answer": "团子", "evidence": ["D2:1"], "category": 1},
            {"question": "Which city is Mel moving to?", "answer": "Lisbon", "evidence": ["D2:3"], "category": 3}]},
    {"sample_id": "conv-b", "conversation": {
        "speaker_a": "Jon", "speaker_b": "Gina",
        "session_1_date_time": "4:04 pm on 20 January, 2023",
        "session_1": [turn("D1:1", "Jon", "I lost my job as a banker, so I am opening a dance studio."),
                      turn("D1:2", "Gina", "I started an online clothing store after losing my job too.")]},
     "qa": [{"question": "What business is Jon starting?", "answer": "a dance studio", "evidence": ["D1:1"], "category": 4},
            {"question": "What kind of store did Gina open?", "answer": "an online clothing store", "evidence": ["D1:2"],
             "category": 4}]},
]
TURNS = {"conv-a": 6, "conv-b": 2}

# question -> (what of the memories the answer is read from, the answer given when it is there)
ANSWERS = {
    "What is the name of Caroline's dog?": ("named him Biscuit", "Biscuit"),
    "When did Caroline adopt her puppy?": ("adopted a beagle puppy yesterday", "7 May 2023"),
    "Mel的猫叫什么名字？": ("我的猫叫团子", "团子"),
    "Which city is Mel moving to?": ("moving to Lisbon", "Porto"),  # a wrong answer: J is not all-or-nothing
    "What business is Jon starting?": ("opening a dance studio", "A dance studio."),
    "What kind of store did Gina open?": ("online clothing store", "An online clothing store"),
}


def prompt_of(messages) -> str:
    return next(p.content for m in messages for p in m.parts if isinstance(p, UserPromptPart))


class Answerer:
    """Answers from the memories in its prompt; raises on call `fail_at` (an interrupted run)."""

    def __init__(self, fail_at: int | None = None) -> None:
        self.prompts: list[str] = []
        self.fail_at = fail_at

    def __call__(self, messages, info: AgentInfo) -> ModelResponse:
        prompt = prompt_of(messages)
        self.prompts.append(prompt)
        if self.fail_at is not None and len(self.prompts) == self.fail_at:
            raise RuntimeError("the model server went away")
        memories = prompt.split("<memories>")[1].split("</memories>")[0]
        needle, reply = ANSWERS[re.search(r"Question: (.*)", prompt).group(1)]
        return ModelResponse(parts=[TextPart(reply if needle in memories else "not in the memories")])

    @property
    def model(self) -> FunctionModel:
        return FunctionModel(self)


def verdict(prompt: str) -> dict:
    gold = re.search(r"Reference answer: (.*)", prompt).group(1)
    answer = re.search(r"Answer to grade: (.*)", prompt).group(1)
    return {"reason": "scripted", "verdict": "CORRECT" if gold.lower() in answer.lower() else "WRONG"}


class Judge:
    """A judge whose first `malformed` replies per question are unusable (text, then a bad verdict)."""

    def __init__(self, malformed: int = 0, *, text_only: bool = False) -> None:
        self.malformed = malformed
        self.text_only = text_only
        self.calls: list[list] = []

    def __call__(self, messages, info: AgentInfo) -> ModelResponse:
        self.calls.append(messages)
        tries = sum(isinstance(m, ModelResponse) for m in messages)  # its replies so far, each sent back for a retry
        if tries < self.malformed:
            if tries % 2 == 0 or self.text_only:
                return ModelResponse(parts=[TextPart("CORRECT, clearly")])  # no structured output at all
            return ModelResponse(parts=[ToolCallPart(info.output_tools[0].name, {"reason": "?", "verdict": "MAYBE"})])
        return ModelResponse(parts=[ToolCallPart(info.output_tools[0].name, verdict(prompt_of(messages)))])

    @property
    def model(self) -> FunctionModel:
        return FunctionModel(self)


@pytest.fixture
def dataset(tmp_path: Path) -> Path:
    path = tmp_path / "tiny-locomo.json"
    path.write_text(json.dumps(DATA, ensure_ascii=False))
    return path


def lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


async def test_answers_come_from_the_packed_memories_and_are_judged_by_category(tmp_path, dataset, embedder):
    answerer, judge, out = Answerer(), Judge(), tmp_path / "qa.jsonl"
    report = await run_qa_bench(dataset, out=out, model=answerer.model, judge=judge.model, embedder=embedder)
    assert len(answerer.prompts) == 6 and len(judge.calls) == 6  # category 5 is never asked
    for prompt in answerer.prompts:  # each prompt carried the memory its answer is in
        needle, _ = ANSWERS[re.search(r"Question: (.*)", prompt).group(1)]
        assert needle in prompt.split("<memories>")[1].split("</memories>")[0]
    assert "8 May 2023" in answerer.prompts[1]  # memories carry their dates: "yesterday" can be worked out
    assert report["questions"] == 6 and report["correct"] == 5 and report["J"] == 0.833
    assert report["by_category"] == {"1": {"n": 1, "correct": 1, "J": 1.0}, "2": {"n": 1, "correct": 1, "J": 1.0},
                                     "3": {"n": 1, "correct": 0, "J": 0.0}, "4": {"n": 3, "correct": 3, "J": 1.0}}
    assert report["judge_errors"] == 0 and report["answer_errors"] == 0
    assert 0 < report["context_tokens"]["median"] <= 2000 and report["answer_usage"]["input_tokens"] > 0
    assert report["answer_ms"]["p95"] >= report["answer_ms"]["p50"] > 0 and report["judge_ms"]["p50"] > 0
    rows = lines(out)
    assert [r["kind"] for r in rows] == ["config", "ingested", "answer", "answer", "answer", "answer", "ingested", "answer", "answer"]
    chinese = next(r for r in rows if r.get("key") == "conv-a#4")
    assert chinese["answer"] == "团子" and chinese["verdict"] == "CORRECT" and chinese["category"] == 1
    assert next(r for r in rows if r.get("key") == "conv-a#5")["answer"] == "Porto"


async def test_a_small_budget_packs_fewer_memories(tmp_path, dataset, embedder):
    answerer = Answerer()
    report = await run_qa_bench(dataset, out=tmp_path / "qa.jsonl", model=answerer.model, judge=Judge().model,
                                embedder=embedder, budget=20)
    rows = [r for r in lines(tmp_path / "qa.jsonl") if r["kind"] == "answer"]
    assert all(r["context_tokens"] <= 20 for r in rows) and report["correct"] < 5
    assert any(r["answer"] == "not in the memories" for r in rows)


async def test_malformed_judge_output_is_retried_then_accepted(tmp_path, dataset, embedder):
    judge = Judge(malformed=2)  # text, then a verdict that is not CORRECT/WRONG, then a valid one
    report = await run_qa_bench(dataset, out=tmp_path / "qa.jsonl", model=Answerer().model, judge=judge.model, embedder=embedder)
    assert report["judge_errors"] == 0 and report["correct"] == 5
    assert len(judge.calls) == 6 * 3
    assert report["judge_usage"]["requests"] == 18


async def test_a_judge_that_stays_malformed_is_a_judge_error_not_a_verdict(tmp_path, dataset, embedder):
    judge = Judge(malformed=100, text_only=True)  # never a structured verdict
    report = await run_qa_bench(dataset, out=tmp_path / "qa.jsonl", model=Answerer().model, judge=judge.model,
                                embedder=embedder, judge_retries=1)
    assert report["questions"] == 6 and report["judge_errors"] == 6 and report["correct"] == 0 and report["J"] == 0.0
    assert len(judge.calls) == 6 * 2
    rows = [r for r in lines(tmp_path / "qa.jsonl") if r["kind"] == "answer"]
    assert all(r["verdict"] is None and "UnexpectedModelBehavior" in r["judge_error"] for r in rows)


async def test_an_interrupted_run_resumes_with_only_the_questions_left(tmp_path, dataset, embedder):
    out = tmp_path / "qa.jsonl"
    with pytest.raises(RuntimeError, match="went away"):
        await run_qa_bench(dataset, out=out, model=Answerer(fail_at=3).model, judge=Judge().model, embedder=embedder)
    assert [r.get("key") for r in lines(out) if r["kind"] == "answer"] == ["conv-a#0", "conv-a#1"]
    # what a run killed while it ingested conv-b would leave: its turns stored, not marked ingested;
    # and a last line cut short by the kill
    mem = await MemoryOS.open(store_path(out), embedder=embedder)
    await mem.ingest(Scope("conv-b"), [{"id": "D1:1", "actor": "Jon", "text": "half an ingest"}])
    with out.open("a") as handle:
        handle.write('{"kind": "answer", "key": "conv-a#4", "verd')
    answerer, judge = Answerer(), Judge()
    report = await run_qa_bench(dataset, out=out, model=answerer.model, judge=judge.model, embedder=embedder)
    assert len(answerer.prompts) == 4 and len(judge.calls) == 4
    assert report["questions"] == 6 and report["resumed"] == 2 and report["answered_now"] == 4 and report["correct"] == 5
    assert [r.get("key") for r in lines(out) if r["kind"] == "answer"] == [
        "conv-a#0", "conv-a#1", "conv-a#4", "conv-a#5", "conv-b#0", "conv-b#1"]
    mem = await MemoryOS.open(store_path(out), embedder=embedder)  # a fresh look at what the run left
    for sample, turns in TURNS.items():  # conv-a not ingested twice; conv-b's half ingest replaced
        assert len(await mem.list(Scope(sample), "episodic", limit=100)) == turns
    again = await run_qa_bench(dataset, out=out, model=Answerer(fail_at=1).model, judge=Judge().model, embedder=embedder)
    assert again["answered_now"] == 0 and again["questions"] == 6 and again["remaining"] == 0


async def test_a_changed_configuration_is_refused_unless_restarted(tmp_path, dataset, embedder):
    out = tmp_path / "qa.jsonl"
    await run_qa_bench(dataset, out=out, model=Answerer().model, judge=Judge().model, embedder=embedder, max_questions=2)
    before = out.read_text()
    with pytest.raises(ConfigError, match=r"budget differ.*budget was 2000, now 1000.*--restart"):
        await run_qa_bench(dataset, out=out, model=Answerer().model, judge=Judge().model, embedder=embedder, budget=1000)
    assert out.read_text() == before
    answerer = Answerer()
    report = await run_qa_bench(dataset, out=out, model=answerer.model, judge=Judge().model, embedder=embedder, budget=1000,
                                restart=True)
    assert len(answerer.prompts) == 6 and report["resumed"] == 0 and report["config"]["budget"] == 1000


def manager_plan(messages, info: AgentInfo) -> ModelResponse:
    """Inserts one fact per batch of English turns; answers Chinese turns with no usable plan."""
    prompt = prompt_of(messages)
    if "团子" in prompt:
        return ModelResponse(parts=[TextPart("I cannot decide")])
    fact = {"subject": "batch", "summary": f"MANAGER-FACT {len(prompt)}"}
    return ModelResponse(parts=[ToolCallPart(info.output_tools[0].name,
                                             {"actions": [{"kind": "insert", "store": "semantic", "fields": fact}]})])


async def test_manager_ingestion_adds_its_memories_and_a_failed_batch_does_not_stop_the_run(tmp_path, dataset, embedder):
    answerer, out = Answerer(), tmp_path / "qa.jsonl"
    report = await run_qa_bench(dataset, out=out, model=answerer.model, judge=Judge().model, embedder=embedder,
                                manager_model=FunctionModel(manager_plan), manager_batch=2)
    ingested = {r["sample_id"]: r for r in lines(out) if r["kind"] == "ingested"}
    # conv-a: each session in batches of 2 and 1 (session 2's first batch, in Chinese, fails); conv-b: one batch
    assert ingested["conv-a"]["manager_batches"] == 4 and ingested["conv-a"]["manager_failed"] == 1
    assert ingested["conv-a"]["manager_written"] == 3 and ingested["conv-b"]["manager_written"] == 1
    assert "MANAGER-FACT" in answerer.prompts[0] and report["questions"] == 6
    assert report["config"]["manager_model"] == "function:manager_plan:" and report["config"]["manager_batch"] == 2


def test_cli_help_and_bad_input():
    shown = runner.invoke(app, ["bench", "qa", "--help"])
    assert shown.exit_code == 0 and "--judge" in shown.stdout and "--manager-model" in shown.stdout
    missing = runner.invoke(app, ["bench", "qa", "nowhere.json", "--model", "test", "--judge", "test"])
    assert missing.exit_code == 2 and "does not exist" in missing.output


def test_cli_runs_offline_with_the_test_model(tmp_path, dataset):
    out = tmp_path / "run" / "qa.jsonl"
    args = ["bench", "qa", str(dataset), "--model", "test", "--judge", "test", "--embedder", "none", "--out", str(out)]
    done = runner.invoke(app, args)
    assert done.exit_code == 0, done.output
    assert "memos bench qa: J =" in done.stdout and "judge errors 0" in done.stdout
    report = json.loads((tmp_path / "run" / "qa.report.json").read_text())
    assert report["questions"] == 6 and report["judge_errors"] == 0 and set(report["by_category"]) == {"1", "2", "3", "4"}
    refused = runner.invoke(app, [*args, "--budget", "500"])
    assert refused.exit_code == 2 and "budget was 2000, now 500" in refused.output
    category5 = runner.invoke(app, [*args, "--category", "5", "--restart"])
    assert category5.exit_code == 2 and "only categories 1-4" in category5.output


def test_cli_a_model_that_cannot_be_set_up_fails_cleanly_before_writing(tmp_path, dataset, monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    out = tmp_path / "qa.jsonl"
    args = ["bench", "qa", str(dataset), "--model", "test", "--judge", "openai-chat:gpt-4o", "--embedder", "none", "--out", str(out)]
    failed = runner.invoke(app, args)
    assert failed.exit_code == 2 and "OPENAI_API_KEY" in failed.output and "Traceback" not in failed.output
    assert not out.exists() and not store_path(out).exists()


async def test_an_answer_model_that_returns_nothing_is_an_answer_error(tmp_path, dataset, embedder):
    def silent_on_lisbon(messages, info: AgentInfo) -> ModelResponse:
        if "Which city" in prompt_of(messages):
            return ModelResponse(parts=[])  # nothing at all, every time it is asked again
        return Answerer()(messages, info)

    judge = Judge()
    report = await run_qa_bench(dataset, out=tmp_path / "qa.jsonl", model=FunctionModel(silent_on_lisbon), judge=judge.model,
                                embedder=embedder)
    assert report["answer_errors"] == 1 and report["judge_errors"] == 0 and report["questions"] == 6
    assert len(judge.calls) == 5 and report["correct"] == 5  # the failed answer is never judged, and not correct
    [failed] = [r for r in lines(tmp_path / "qa.jsonl") if r.get("answer_error")]
    assert failed["key"] == "conv-a#5" and failed["verdict"] is None and failed["answer"] is None
