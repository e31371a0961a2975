"""Architecture rule, checked: the model core (engines, model, loading, repository, inference,
statistics, settings, and `messages`, the request/response conversions) never imports grpc, so
it can be driven by any transport and tested without one."""

from __future__ import annotations

import subprocess
import sys

CORE = ("engines", "model", "loading", "repository", "inference", "statistics", "settings",
        "messages")


def test_model_core_does_not_import_grpc():
    code = (
        "import sys\n"
        + "".join(f"import jaxport.bridge.{m}\n" for m in CORE)
        + "bad = sorted(m for m in sys.modules if m == 'grpc' or m.startswith('grpc.'))\n"
        + "print(bad)\n"
        + "sys.exit(1 if bad else 0)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
