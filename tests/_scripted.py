"""A scripted stand-in for the LLM (pydantic-ai `FunctionModel`) shared by the agent tests."""

from __future__ import annotations

from pydantic_ai.messages import ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import AgentInfo, FunctionModel


class Script:
    """A FunctionModel answering from a list of canned responses (a response, a text, or a function
    of the messages and tools); keeps what each request was shown. Out of responses: "ok"."""

    def __init__(self, *responses) -> None:
        self.responses = list(responses)
        self.requests: list[list] = []

    def __call__(self, messages, info: AgentInfo) -> ModelResponse:
        self.requests.append(messages)
        item = self.responses.pop(0) if self.responses else "ok"
        return item(messages, info) if callable(item) else (item if isinstance(item, ModelResponse) else ModelResponse(parts=[TextPart(item)]))

    @property
    def model(self) -> FunctionModel:
        return FunctionModel(self)


def plan(*actions):
    """The memory manager's answer: a plan of these actions."""
    return lambda messages, info: ModelResponse(parts=[ToolCallPart(info.output_tools[0].name, {"actions": list(actions)})])
