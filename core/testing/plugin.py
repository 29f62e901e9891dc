"""pytest plugin (entry point ``pytest11``): ``--tilecraft-target NAME`` selects the target the
conformance suite checks; the ``tilecraft_target`` fixture hands it to the tests."""

from __future__ import annotations

from typing import Any

import pytest


def pytest_addoption(parser: Any) -> None:
    group = parser.getgroup("tilecraft")
    group.addoption("--tilecraft-target", action="store", default=None, metavar="NAME",
                    help="installed tilecraft target whose conformance to check")


@pytest.fixture(scope="session")
def tilecraft_target_name(request: Any) -> str:
    """The target named by --tilecraft-target (override this fixture in a plugin's tests)."""
    name = request.config.getoption("--tilecraft-target")
    if not name:
        pytest.skip("no target selected: pass --tilecraft-target NAME")
    return name


@pytest.fixture(scope="session")
def tilecraft_target(tilecraft_target_name: str) -> Any:
    """The loaded target object; a broken target fails with the registry's reason."""
    from tilecraft.target.registry import get_target

    return get_target(tilecraft_target_name)
