"""How a command picks its model, and what it says when that model cannot be used.

`choose_model` resolves a model string (or a server URL given by `--base-url`) once, before a
store is opened, so a provider whose client is not installed is one line naming the extra to
install, not a traceback from inside the first reply. It remembers which URL the model talks to
and which setting chose it, so a server that is down is reported by its URL and that setting
(`ChosenModel.explain`). `MEMOS_MODEL_RETRIES` and `MEMOS_MODEL_TIMEOUT` set the OpenAI-compatible
client's retries and per-request timeout (its defaults: 2 retries, 600 s): with 0 retries a
server that is down is reported at once.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import Any

from memos.exceptions import ConfigError

__all__ = ["ChosenModel", "RETRIES_ENV", "TIMEOUT_ENV", "choose_model", "missing_extra"]

RETRIES_ENV = "MEMOS_MODEL_RETRIES"
TIMEOUT_ENV = "MEMOS_MODEL_TIMEOUT"
_URL_SETTINGS = {"ollama": "OLLAMA_BASE_URL", "openai": "OPENAI_BASE_URL", "openai-chat": "OPENAI_BASE_URL",
                 "openai-responses": "OPENAI_BASE_URL"}
"""Provider prefix -> the environment variable its provider reads its server's URL from."""
_MEMOS_EXTRAS = {"openai": "memos-memory[openai]"}
"""pydantic-ai-slim extras that memos offers under its own extra of the same purpose."""


@dataclass(frozen=True)
class ChosenModel:
    """A model ready to use, the URL it talks to and the setting that chose that URL."""

    model: Any
    name: str
    url: str | None = None
    setting: str = ""

    def explain(self, exc: BaseException) -> str | None:
        """One line for a model server that cannot be reached (None for any other error)."""
        errors = _pydantic_ai_errors()
        if errors is None or not isinstance(exc, errors.ModelConnectionError):
            return None
        where = f"the model server at {self.url}" if self.url else f"the server of model {self.name!r}"
        chosen = f" (chosen by {self.setting})" if self.setting else ""
        return (f"cannot reach {where}{chosen}: {str(exc).rstrip('.')}. Is it running? "
                f"({RETRIES_ENV} and {TIMEOUT_ENV} set how long memos keeps trying)")


def choose_model(name: str, base_url: str | None = None) -> ChosenModel:
    """The model `name` names ('test': an offline TestModel), or `name` served by the
    OpenAI-compatible server at `base_url` (`--base-url`: Ollama, vLLM, llama.cpp)."""
    if name == "test":
        from pydantic_ai.models.test import TestModel

        return ChosenModel(TestModel(call_tools=[], custom_output_text="(test model) noted."), name)
    provider = name.partition(":")[0] if ":" in name else ""
    try:
        if base_url:
            from pydantic_ai.models.openai import OpenAIChatModel
            from pydantic_ai.providers.openai import OpenAIProvider

            served = name.split(":", 1)[1] if provider in ("openai-chat", "openai", "ollama") else name
            client = OpenAIProvider(base_url=base_url, api_key=os.environ.get("OPENAI_API_KEY") or "local").client
            setting = "MEMOS_BASE_URL" if os.environ.get("MEMOS_BASE_URL") == base_url else "--base-url"
            model: Any = OpenAIChatModel(served, provider=OpenAIProvider(openai_client=_configured(client)))
            return ChosenModel(model, name, base_url, setting)
        from pydantic_ai.models import infer_model

        model = infer_model(name, provider_factory=_provider)
    except ImportError as exc:
        raise ConfigError(missing_extra(exc, name) or f"the model {name!r} cannot be loaded: {exc}") from None
    env = _URL_SETTINGS.get(provider)
    url = os.environ.get(env) if env and os.environ.get(env) else getattr(model, "base_url", None)  # as the setting spells it
    setting = env if env and os.environ.get(env) else f"{provider or 'the provider'}'s default URL; set {env} for another" if env \
        else ""
    return ChosenModel(model, name, url, setting)


def missing_extra(exc: ImportError, model: str | None = None) -> str | None:
    """One line naming what to install, for a provider client pydantic-ai could not import (None
    when `exc` is not about one)."""
    found = re.search(r"pydantic-ai-slim\[([\w-]+)\]", str(exc))
    if found is None:
        return None
    extra = found.group(1)
    package = f"'{_MEMOS_EXTRAS[extra]}'" if extra in _MEMOS_EXTRAS else f"'pydantic-ai-slim[{extra}]'"
    what = f"the model {model!r}" if model else "this model"
    return f"{what} needs the {extra} client, which is not installed: pip install {package}"


def _provider(name: str) -> Any:
    """pydantic-ai's provider for `name`, its OpenAI client set up with memos' retries and timeout."""
    from pydantic_ai.providers import infer_provider

    try:
        provider = infer_provider(name)
    except ValueError:
        raise ConfigError(f"unknown model provider {name!r}; use a pydantic-ai model string such as openai:gpt-4o-mini "
                          "or ollama:llama3.2, or --base-url for an OpenAI-compatible server") from None
    client = getattr(provider, "client", None)
    configured = _configured(client)
    if configured is client:
        return provider
    openai_compatible: Any = type(provider)  # OpenAIProvider, OllamaProvider, ...: each takes its client
    return openai_compatible(openai_client=configured)


def _configured(client: Any) -> Any:
    """`client` with the retries and timeout the environment sets (itself when it sets none or
    the client is not an OpenAI one)."""
    options: dict[str, Any] = {}
    for env, key, kind in ((RETRIES_ENV, "max_retries", int), (TIMEOUT_ENV, "timeout", float)):
        value = os.environ.get(env)
        if value:
            try:
                options[key] = kind(value)
            except ValueError:
                raise ConfigError(f"{env} must be a number, got {value!r}") from None
    if not options or not hasattr(client, "with_options") or type(client).__name__ != "AsyncOpenAI":
        return client
    return client.with_options(**options)


def _pydantic_ai_errors() -> Any:
    import sys

    return sys.modules.get("pydantic_ai.exceptions")
