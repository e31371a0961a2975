"""What every test directory shares (tests/README.md has the rules).

- `tests/` is importable, so `from support.X import ...` works from any test directory.
- `jaxport verify`'s checks run in the test process (`support.inprocess.patch_verify`): the
  process boundary is what only the tests marked `verify_subprocess` check.
- Markers: `slow` (the second tier, `make test-all`) takes its reason:
  `@pytest.mark.slow(reason="...")`; `verify_subprocess`. Slow tests are collected first.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent
if str(TESTS) not in sys.path:
    sys.path.insert(0, str(TESTS))


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "verify_subprocess: jaxport verify starts its fresh `python -I` process per "
                   "check, as it does for users (the test proves that isolation)")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Slow tests first (otherwise in collection order): under pytest-xdist the test files are
    handed to the processes in this order, so the minutes-long ones (images, wheels, sanitizer
    builds) start at once and the short ones fill in around them, instead of one starting
    last and running alone."""
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)


@pytest.fixture(autouse=True)
def _verify_in_this_process(request: pytest.FixtureRequest,
                            monkeypatch: pytest.MonkeyPatch) -> None:
    if request.node.get_closest_marker("verify_subprocess") is None:
        from support.inprocess import patch_verify

        patch_verify(monkeypatch)
