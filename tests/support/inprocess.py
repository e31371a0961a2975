"""`jaxport` and `jaxport verify` run inside the test process, where the process boundary is not
what a test checks (tests/README.md, "What runs in a process of its own").

A fresh Python process costs the test an interpreter, JAX's import and a cold compilation cache
(seconds on a loaded machine) and `jaxport verify` starts one per check plus a platform probe.
What they run is the same code either way; the boundary matters only to the tests that prove
it (verify's isolation: the model's module cannot be imported by a check; the console script
itself), which keep it.

- `patch_verify(monkeypatch)`: `jaxport.exporter.verify.run_checks` runs each check through
  the worker's own entry point (`worker.main`, its JSON line read back as in a real worker) in
  this process, one at a time, with the model's module hidden from `sys.modules` while it
  runs and jax's x64 setting restored after; the platform probe runs verify's probe code here.
  A sharded artifact (more than one device) still gets fresh processes: its devices must be
  configured before jax starts. The root conftest applies it to every test not marked
  `verify_subprocess`.
- `run_jaxport(args, cwd, pythonpath)`: the `jaxport` console script's `main` in this process,
  with its stdout/stderr captured and its exit status returned as a CompletedProcess; modules
  imported from `pythonpath` are forgotten afterwards (two tests may each write a `model.py`),
  and modules of the same name imported from elsewhere are hidden while it runs.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import subprocess
import sys
import threading
import traceback
import warnings
from collections.abc import Iterator, Sequence
from pathlib import Path

__all__ = ["patch_verify", "run_jaxport"]

#: One in-process check at a time (they swap sys.stdout and verify's tolerance override);
#: `jaxport verify` run by run_jaxport waits on its checks' threads, so the CLI has its own.
_VERIFY_LOCK = threading.Lock()
_CLI_LOCK = threading.Lock()


@contextlib.contextmanager
def _captured() -> Iterator[tuple[io.StringIO, io.StringIO]]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        yield out, err


@contextlib.contextmanager
def _x64_restored() -> Iterator[None]:
    import jax

    before = bool(jax.config.jax_enable_x64)
    try:
        yield
    finally:
        if bool(jax.config.jax_enable_x64) != before:
            jax.config.update("jax_enable_x64", before)


def patch_verify(monkeypatch) -> None:
    """Make `run_checks` run its checks in this process (see the module doc)."""
    from jaxport.artifact import manifest as manifest_mod
    from jaxport.exporter.verify import orchestration, worker
    from jaxport.exporter.verify.results import CheckResult

    fresh_worker = orchestration._run_worker

    def present_platforms(timeout: float = 300.0) -> list[str]:
        with _VERIFY_LOCK, _captured() as (out, _):
            exec(orchestration._PROBE, {})
        return [str(p) for p in json.loads(out.getvalue().strip().splitlines()[-1])]

    def run_worker(check: str, root: Path, timeout: float,
                   tolerance: tuple[float | None, float | None] = (None, None),
                   platform: str = "cpu") -> CheckResult:
        m = manifest_mod.load(root)
        if m.nr_devices > 1:
            return fresh_worker(check, root, timeout, tolerance, platform)
        argv = ["--worker", check, str(root), "--platform", platform]
        atol, rtol = tolerance
        if atol is not None:
            argv += ["--atol", repr(float(atol))]
        if rtol is not None:
            argv += ["--rtol", repr(float(rtol))]
        source = m.source_function.split(":", 1)[0] if ":" in m.source_function else ""
        with _VERIFY_LOCK, _x64_restored(), _captured() as (out, err):
            hidden = sys.modules.pop(source, None) if source else None
            try:
                worker.main(argv)
            finally:
                from jaxport.exporter.verify.tolerances import set_override

                set_override(None, None)
                if hidden is not None:
                    sys.modules[source] = hidden
        last = out.getvalue().strip().splitlines()[-1:] or [""]
        try:
            return CheckResult.from_json(json.loads(last[0]))
        except (ValueError, KeyError, TypeError):
            return CheckResult(check, "fail", f"worker printed no result: {err.getvalue()[-500:]}")

    monkeypatch.setattr(orchestration, "present_platforms", present_platforms)
    monkeypatch.setattr(orchestration, "_run_worker", run_worker)


def _shadowed_modules(paths: Sequence[str]) -> dict[str, object]:
    """Take out of `sys.modules` (and return, to be put back) every module an earlier test
    imported from elsewhere under a name that `paths` also provides: a fresh `jaxport` process
    with PYTHONPATH=paths would import `paths`' module of that name (tests/models/broken.py,
    not tests/reliability/broken.py)."""
    provided = set()  # the top-level names `paths` provide: modules and packages
    for p in map(Path, paths):
        for entry in p.iterdir() if p.is_dir() else ():
            if entry.suffix == ".py" or (entry / "__init__.py").exists():
                provided.add(entry.stem if entry.suffix == ".py" else entry.name)
    out = {}
    for name, module in list(sys.modules.items()):
        file = getattr(module, "__file__", None) or ""
        if (name.split(".", 1)[0] in provided
                and not any(file.startswith(p + os.sep) for p in paths)):
            out[name] = sys.modules.pop(name)
    return out


def run_jaxport(args: Sequence[str], cwd: Path, pythonpath: Sequence[Path] = (),
                env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """`jaxport ARGS` as the console script runs it, in this process (see the module doc)."""
    from jaxport.cli import main

    paths = [str(Path(p).resolve()) for p in pythonpath]
    shadowed = _shadowed_modules(paths)
    before = set(sys.modules)
    saved_env = {k: os.environ.get(k) for k in (env or {})}
    rc = 0
    with _CLI_LOCK, _x64_restored(), _captured() as (out, err), warnings.catch_warnings():
        warnings.simplefilter("default")
        old_cwd, old_path = os.getcwd(), list(sys.path)
        os.environ.update(env or {})
        try:
            os.chdir(cwd)
            sys.path[:0] = paths
            rc = int(main(list(args)) or 0)
        except SystemExit as exc:  # argparse's usage errors
            rc = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
            if isinstance(exc.code, str):
                print(exc.code, file=sys.stderr)
        except Exception:  # what the interpreter would print before exiting 1
            traceback.print_exc()
            rc = 1
        finally:
            os.chdir(old_cwd)
            sys.path[:] = old_path
            for k, v in saved_env.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
            for name in set(sys.modules) - before:
                file = getattr(sys.modules[name], "__file__", None) or ""
                if any(file.startswith(p + os.sep) for p in paths):
                    del sys.modules[name]
            sys.modules.update(shadowed)
    return subprocess.CompletedProcess(["jaxport", *args], rc, out.getvalue(), err.getvalue())
