"""Runs the docstring examples of every module of the plugin."""

from __future__ import annotations

import doctest
import importlib
import pkgutil

import pytest
import tilecraft_mali


def _module_names() -> list[str]:
    names = ["tilecraft_mali"]
    for info in pkgutil.walk_packages(tilecraft_mali.__path__,
                                      prefix="tilecraft_mali."):
        names.append(info.name)
    return sorted(names)


@pytest.mark.parametrize("module_name", _module_names())
def test_docstring_examples(module_name: str) -> None:
    module = importlib.import_module(module_name)
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.failed == 0, f"{result.failed} docstring example(s) failed in {module_name}"
