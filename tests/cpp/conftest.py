"""What the C++ tests share, built and exported once per test run (also across pytest-xdist
workers: the first one does it under a file lock, the others wait for it and reuse it):

- the library, its tests and jaxport-pjrt-run, built by `make cpp` (CMake, build/cpp), and the
  pinned CPU PJRT plugin (`make pjrt-plugin`);
- the test artifacts, each exported with `jaxport export` from a model under tests/models (or
  tests/cpp/special_values.py): `demo` (the demo's own export), `batched` (the same model at
  batch sizes 1 and 4), `special` (NaN and infinities through min/max/clip), `bucketed`
  (tests/models/seq.py with symbolic B and T, bucket programs and T padded by its mask),
  `checked` and `checked_batched` (tests/models/checked.py with every check kind, at fixed
  shapes and at batch sizes 1 and 4).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from cpp_env import BINARY, BUILD, PLUGIN, export_all, make, once, shared_root


@pytest.fixture(scope="session")
def cpp_build() -> Path:
    """build/cpp with the library, its tests and jaxport-pjrt-run; the plugin in build/pjrt."""
    make("pjrt-plugin", "cpp")
    assert BINARY.is_file() and PLUGIN.is_file()
    return BUILD


@pytest.fixture(scope="session")
def cpp_artifacts(tmp_path_factory: pytest.TempPathFactory, worker_id: str) -> Path:
    """The directory holding every test artifact (JAXPORT_TEST_ARTIFACTS of the golden tests)."""
    return once(shared_root(tmp_path_factory, worker_id), "cpp-artifacts", export_all)
