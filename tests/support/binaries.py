"""The programs the tests run, built ONCE before pytest and handed over by environment variable.

No test builds anything: `tests/tiers.py` (its `build` phase, `make test`/`make test-all`, or
`tests/tiers.py pytest ARGS` for a run of your own) runs every `Build` below, then starts pytest
and the conformance runners with each build's variable set to what it made. A test asks for a
program with `path(name)`; when the variable is unset or names nothing, the test FAILS (never
skips) in one line saying how to get it.

    from support.binaries import path
    front = path("front")          # .venv/bin/jaxport-front, built by make setup

The table is the one list of what the tests need built, where it goes and how it is made.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

__all__ = ["BUILDS", "Build", "MissingBinary", "build_all", "environment", "path"]

REPO = Path(__file__).resolve().parents[2]
VENV_BIN = Path(sys.executable).parent
TEST_BIN = REPO / "build" / "test-bin"


@dataclass(frozen=True)
class Build:
    """One program (or directory) the tests use: `env` names it for them, `out` is where it is
    made, `cmd` (run in `cwd`, "{out}" replaced) makes it; `tiers` says which tiers need it."""

    name: str
    env: str
    out: Path
    cwd: Path
    cmd: tuple[str, ...]
    what: str
    tiers: tuple[str, ...] = ("fast", "all")
    #: Globs (under cwd) of everything the build reads, for builds whose tool always redoes
    #: its work (Maven): when none of them changed since the last successful build, it is not
    #: run again (the stamp beside `out` holds their digest).
    inputs: tuple[str, ...] = ()
    #: The command builds a pinned version of a program from outside this tree: the same
    #: command makes the same program, so it runs again only when the command changes.
    pinned: bool = False

    def command(self) -> list[str]:
        return [part.replace("{out}", str(self.out)) for part in self.cmd]


JAEGER = "github.com/jaegertracing/jaeger/cmd/jaeger"
JAEGER_VERSION = "v1.76.0"


def _go(package: str) -> tuple[str, ...]:
    return ("go", "build", "-o", "{out}", package)


BUILDS: tuple[Build, ...] = (
    # `make setup` (make test's prerequisite) builds both with cgo next to the venv's python,
    # where `jaxport serve` and `jaxport verify` find them: the tests use those, rebuilt here
    # when a Go source changed so a bare `tests/tiers.py` run tests the tree.
    Build("front", "JAXPORT_TEST_FRONT", VENV_BIN / "jaxport-front", REPO,
          ("make", "-s", "setup"), "the native front (make setup)"),
    Build("native-goldens", "JAXPORT_TEST_NATIVE_GOLDENS", VENV_BIN / "jaxport-native-goldens",
          REPO, ("make", "-s", "setup"), "jaxport-native-goldens (make setup)"),
    Build("pjrt-plugin", "JAXPORT_TEST_PJRT_PLUGIN",
          REPO / "build" / "pjrt" / "pjrt_c_api_cpu_plugin.so", REPO, ("make", "-s", "setup"),
          "XLA's CPU PJRT plugin (make setup, make pjrt-plugin)"),
    Build("go-conformance", "JAXPORT_TEST_GO_CONFORMANCE", TEST_BIN / "jaxport-conformance",
          REPO / "clients" / "go", _go("./cmd/jaxport-conformance"),
          "the Go conformance runner (clients/go/cmd/jaxport-conformance)"),
    Build("go-example", "JAXPORT_TEST_GO_EXAMPLE", TEST_BIN / "go-infer-example",
          REPO / "clients" / "go", _go("./examples/infer"),
          "the Go client's example (clients/go/examples/infer)"),
    Build("wire", "JAXPORT_TEST_WIRE", TEST_BIN / "wire", REPO / "tests" / "bench" / "wire",
          _go("."), "the bench's 16 MiB gRPC tool (tests/bench/wire)"),
    Build("engine-test", "JAXPORT_TEST_ENGINE_TEST", TEST_BIN / "engine.test",
          REPO / "bridge" / "front", ("go", "test", "-c", "-o", "{out}", "./engine"),
          "the engine package's Go test binary (TestCheckParity on cases the test writes)"),
    # The Java client, its JUnit tests and the conformance runner: one Maven call compiles them
    # and runs the JUnit tests (mvn test); the file holds the runtime classpath (the compiled
    # classes, then the dependencies) the conformance runner and the example run with.
    Build("java-classpath", "JAXPORT_TEST_JAVA_CLASSPATH", TEST_BIN / "java-classpath",
          REPO / "clients" / "java",
          ("mvn", "-B", "-q", "-Dstyle.color=never", "test", "dependency:build-classpath",
           "-Dmdep.includeScope=test", "-Dmdep.outputFile={out}.deps"),
          "the Java client and conformance runner, compiled, JUnit tests run (mvn test)",
          inputs=("pom.xml", "src/**/*")),
    Build("cpp", "JAXPORT_TEST_CPP_BUILD", REPO / "build" / "cpp", REPO,
          ("make", "-s", "cpp"), "the C++ library, its tests and jaxport-pjrt-run (make cpp)"),
    # Jaeger all-in-one, the OTLP receiver tests/front/test_tracing.py reads traces back from:
    # a throw-away module takes it as a tool from the Go module proxy (the first build on a
    # machine compiles the collector, minutes on 2 cores; Go's build cache keeps it).
    Build("jaeger", "JAXPORT_TEST_JAEGER", TEST_BIN / "jaeger", REPO,
          ("sh", "-c", 'set -e; d=$(mktemp -d); trap \'rm -rf "$d"\' EXIT; cd "$d"; '
           "go mod init jaegerbuild 2>/dev/null; "
           f"go get -tool {JAEGER}@{JAEGER_VERSION}; "
           f'CGO_ENABLED=0 go build -o "{{out}}" {JAEGER}'),
          f"Jaeger all-in-one {JAEGER_VERSION} (the OTLP receiver of tests/front/test_tracing.py)",
          tiers=("all",), pinned=True),
)
_BY_NAME = {b.name: b for b in BUILDS}


class MissingBinary(RuntimeError):
    """A handed-over program is missing (one line: which, and how to get it)."""


def environment(tier: str = "fast") -> dict[str, str]:
    """The variables a test run gets: each build of `tier` -> its path."""
    return {b.env: str(b.out) for b in BUILDS if tier in b.tiers}


def _fail(message: str) -> None:
    import pytest

    pytest.fail(message, pytrace=False)


def path(name: str) -> Path:
    """The handed-over program `name` (a key of the table); a test fails in one line when it is
    not there. Outside pytest, raises MissingBinary."""
    build = _BY_NAME[name]
    value = os.environ.get(build.env)
    problem = None
    if not value:
        problem = f"{build.env} is not set"
    elif not Path(value).exists():
        problem = f"{build.env}={value}: no such file"
    if problem is None:
        return Path(value)
    message = (f"{problem}: {build.what} is built before the tests by tests/tiers.py (make "
               "test; for a pytest run of your own: .venv/bin/python tests/tiers.py pytest "
               "ARGS)")
    if "PYTEST_CURRENT_TEST" in os.environ or "pytest" in sys.modules:
        _fail(message)
    raise MissingBinary(message)


def _java_classpath(build: Build) -> None:
    """The runtime classpath file of the Java build: dependencies + the compiled classes."""
    deps = Path(f"{build.out}.deps").read_text().strip()
    target = build.cwd / "target"
    build.out.write_text(os.pathsep.join([str(target / "test-classes"), str(target / "classes"),
                                          deps]))
    Path(f"{build.out}.deps").unlink()


def _digest(build: Build) -> str:
    h = hashlib.sha256(" ".join(build.command()).encode())
    for pattern in build.inputs:
        for f in sorted(build.cwd.glob(pattern)):
            if f.is_file():
                h.update(str(f.relative_to(build.cwd)).encode() + b"\0" + f.read_bytes())
    return h.hexdigest()


def _stamp(build: Build) -> Path:
    return Path(f"{build.out}.stamp")


def _run_build(build: Build, log) -> str | None:
    """Run one build (unless its inputs are unchanged since its stamp); its failure line."""
    cmd = build.command()
    if shutil.which(cmd[0]) is None:
        return f"{build.name}: `{cmd[0]}` not found on PATH ({build.what})"
    digest = _digest(build) if build.inputs or build.pinned else ""
    if digest and build.out.exists() and _stamp(build).exists() \
            and _stamp(build).read_text() == digest:
        log(f"  {build.name:<16} unchanged since its last build ({_stamp(build)})")
        return None
    _stamp(build).unlink(missing_ok=True)
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=build.cwd, capture_output=True, text=True)
    if proc.returncode == 0 and build.name == "java-classpath":
        _java_classpath(build)
    seconds = time.perf_counter() - t0
    if proc.returncode != 0:
        log(proc.stdout[-6000:] + proc.stderr[-6000:])
        return f"{build.name}: `{' '.join(cmd)}` failed (exit {proc.returncode})"
    if digest:
        _stamp(build).write_text(digest)
    log(f"  built {build.name:<16} {seconds:6.1f} s  {build.out}")
    return None


def build_all(tier: str, log=print) -> list[str]:
    """Run every build of `tier` (each command once), the independent ones at the same time:
    the Maven build, the C++ build and the Go builds wait mostly on different things (a JVM,
    two compilers, the Go cache). The failures, one line each (the command's output is
    printed)."""
    TEST_BIN.mkdir(parents=True, exist_ok=True)
    todo: list[Build] = []
    seen: set[tuple[str, ...]] = set()
    for build in BUILDS:
        key = (str(build.cwd), *build.command())
        if tier in build.tiers and key not in seen:
            seen.add(key)
            todo.append(build)
    lock = threading.Lock()

    def locked_log(line: str) -> None:
        with lock:
            log(line)

    with ThreadPoolExecutor(max_workers=len(todo) or 1) as pool:
        results = list(pool.map(lambda b: _run_build(b, locked_log), todo))
    failures = [r for r in results if r]
    for build in BUILDS:
        if tier in build.tiers and not build.out.exists() and not any(
                f.startswith(f"{build.name}:") for f in failures):
            failures.append(f"{build.name}: {build.out} missing after "
                            f"`{' '.join(build.command())}`")
    return failures
