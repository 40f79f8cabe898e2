"""Every public module declares a sorted, complete `__all__`; every prompt template renders."""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import jinja2
import jinja2.meta
import pytest

from memos import agents
import memos
from memos import memtypes
from memos import prompts

MODULES = sorted(
    name for package in (memos, memtypes, agents)
    for _, name, _ in pkgutil.walk_packages(package.__path__, package.__name__ + ".")
    if not any(part.startswith("_") for part in name.split(".")) and ".cli" not in name
)


@pytest.mark.parametrize("name", MODULES)
def test_all_is_sorted_and_complete(name):
    module = importlib.import_module(name)
    exported = getattr(module, "__all__", None)
    assert exported is not None, f"{name} has no __all__"
    assert list(exported) == sorted(exported), f"{name}.__all__ is not sorted"
    defined = {n for n, obj in vars(module).items() if not n.startswith("_") and (inspect.isclass(obj) or inspect.isfunction(obj))
               and getattr(obj, "__module__", None) == name}
    assert defined <= set(exported), f"{name}: public but not exported: {sorted(defined - set(exported))}"
    assert all(hasattr(module, n) for n in exported)


@pytest.mark.parametrize("template", prompts.template_names())
def test_every_template_parses_and_declares_its_variables(template):
    env = prompts.environment()
    source = env.loader.get_source(env, template)[0]
    variables = jinja2.meta.find_undeclared_variables(env.parse(source))
    with pytest.raises(jinja2.UndefinedError):  # StrictUndefined: a forgotten variable is an error
        if variables:
            prompts.render(template)
        else:
            raise jinja2.UndefinedError("no variables")
