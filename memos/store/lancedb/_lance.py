"""Import LanceDB without paying for its REST namespace client at startup.

`import lancedb` imports `lance_namespace`, which imports request/response models from
`lance_namespace_urllib3_client`; that package's `__init__` also builds its whole generated
OpenAPI client (nine API classes validated with pydantic), about three quarters of LanceDB's
import time, for a REST namespace server memos never talks to (it opens local directories and
object-store URIs). Before LanceDB is imported, the client package is registered with its real
path but its `__init__` deferred: its `models` subpackage imports as usual, and the first time
anything asks the package itself for a name (a user's own REST namespace connection), its
`__init__` runs and the name is returned. Nothing is patched if the package is already imported
or is not laid out as expected.
"""

from __future__ import annotations

import importlib.util
import sys
from types import ModuleType

_CLIENT = "lance_namespace_urllib3_client"


def defer_rest_client() -> None:
    if _CLIENT in sys.modules:
        return
    try:
        spec = importlib.util.find_spec(_CLIENT)
    except (ImportError, ValueError):
        return
    if spec is None or spec.loader is None or not spec.submodule_search_locations:
        return
    module = importlib.util.module_from_spec(spec)
    loader = spec.loader
    state = {"loaded": False}

    def load_rest(name: str) -> object:
        if name.startswith("__") or state["loaded"]:
            raise AttributeError(f"module {_CLIENT!r} has no attribute {name!r}")
        state["loaded"] = True
        del module.__dict__["__getattr__"]
        loader.exec_module(module)
        return getattr(module, name)

    module.__dict__["__getattr__"] = load_rest
    sys.modules[_CLIENT] = module


def rest_client_loaded() -> bool:
    """Whether the deferred client package has run its `__init__` (for tests)."""
    module: ModuleType | None = sys.modules.get(_CLIENT)
    return module is not None and "__getattr__" not in module.__dict__


defer_rest_client()
