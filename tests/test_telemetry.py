"""OpenTelemetry: memos' own spans and pydantic-ai's instrumentation land in one trace."""

from __future__ import annotations

from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from pydantic_ai.messages import ModelResponse, TextPart, ToolCallPart, ToolReturnPart
from pydantic_ai.models.function import FunctionModel
from pydantic_ai.models.instrumented import InstrumentationSettings

from memos import Scope
from memos.jobs.runs import run_job

exporter = InMemorySpanExporter()
provider = TracerProvider()
provider.add_span_processor(SimpleSpanProcessor(exporter))
trace.set_tracer_provider(provider)


def model(messages, info):
    if any(isinstance(p, ToolReturnPart) for p in messages[-1].parts):
        return ModelResponse(parts=[TextPart("noted")])
    return ModelResponse(parts=[ToolCallPart("core_memory_append", {"label": "human", "text": "Likes kites"})])


async def test_agent_runs_tools_memory_operations_and_jobs_emit_spans(mem):
    exporter.clear()
    agent = mem.agent(FunctionModel(model), Scope("alice", "bot", "s1"), instrument=InstrumentationSettings(tracer_provider=provider))
    assert await agent.chat("I love kites") == "noted"
    await run_job(mem, "decay", Scope("alice"))
    names = [s.name for s in exporter.get_finished_spans()]
    assert {"memos.compile", "memos.search", "memos.add", "memos.job"} <= set(names)
    assert any("core_memory_append" in n for n in names)  # pydantic-ai's tool span
    assert any(n.startswith("invoke_agent") or "agent run" in n for n in names)
    compile_span = next(s for s in exporter.get_finished_spans() if s.name == "memos.compile")
    assert compile_span.attributes["tokens"] > 0 and "Likes kites" not in str(compile_span.attributes)


async def test_instrument_true_records_no_content_so_a_vaulted_secret_reaches_no_span(mem):
    """pydantic-ai's instrumentation records prompts, replies and tool arguments by default: a
    secret the user said and the model passed to vault_store was in the spans in clear.
    `instrument=True` now records the runs and tools without their content (settings passed in
    full are the caller's choice)."""
    secret = "Tr0ub4dor-88-zq"

    def vaulting(messages, info):
        if any(isinstance(p, ToolReturnPart) for p in messages[-1].parts):
            return ModelResponse(parts=[TextPart("stored it safely")])
        return ModelResponse(parts=[ToolCallPart("vault_store", {"caption": "router password", "secret": secret,
                                                                "entry_type": "credential"})])

    exporter.clear()
    agent = mem.agent(FunctionModel(vaulting), Scope("alice", "bot", "s1"), instrument=True, manager_model=FunctionModel(
        lambda messages, info: ModelResponse(parts=[ToolCallPart(info.output_tools[0].name, {"actions": []})])))
    assert await agent.chat(f"my router password is {secret}, keep it") == "stored it safely"
    await agent.flush()
    spans = exporter.get_finished_spans()
    assert any("vault_store" in s.name for s in spans)
    assert not [s.name for s in spans if secret in f"{s.attributes} {[e.attributes for e in s.events]}"]
