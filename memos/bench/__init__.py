"""Benchmarks: retrieval quality on LOCOMO and speed/memory at scale (`memos bench ...`)."""

from .locomo import Conversation, Question, load_locomo
from .retrieval import run_retrieval_bench

__all__ = ["Conversation", "Question", "load_locomo", "run_retrieval_bench"]
