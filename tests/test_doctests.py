"""Runs the docstring examples of every tilecraft module (they are imported by their real
package name, so the examples see the same classes as users do)."""

from __future__ import annotations

import doctest
import importlib
import pkgutil

import pytest

import tilecraft


def _module_names() -> list[str]:
    names = ["tilecraft"]
    for info in pkgutil.walk_packages(tilecraft.__path__, prefix="tilecraft."):
        names.append(info.name)
    return sorted(names)


@pytest.mark.parametrize("module_name", _module_names())
def test_docstring_examples(module_name: str) -> None:
    module = importlib.import_module(module_name)
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.failed == 0, f"{result.failed} docstring example(s) failed in {module_name}"
