"""pydantic-ai agents over a memos `MemoryOS`: chat, memory manager, summarizer, reflection,
consolidation, and the tools / capability that mount memory on any agent."""

from .capability import memory_capability
from .chat import ChatAgent, TurnReport
from .deps import MemoryDeps
from .manager import ManagerPlan, ManagerReport, MemoryManager
from .summarizer import ModelSummarizer
from .tools import ALL_TOOL_NAMES, memory_toolset

__all__ = [
    "ALL_TOOL_NAMES",
    "ChatAgent",
    "ManagerPlan",
    "ManagerReport",
    "MemoryDeps",
    "MemoryManager",
    "ModelSummarizer",
    "TurnReport",
    "memory_capability",
    "memory_toolset",
]
