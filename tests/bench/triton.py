"""The Triton peer of `make bench` (issue 36): a real Triton Inference Server 2.51 on CPU,
installed by tests/conformance/peers/triton_server.py (the `tritonserver` that the
nvidia-pytriton==0.7.0 wheel bundles, its python backend with the stub of this Python; shared
with `make conformance-peers`, installed once into build/peers/triton), serving the bench's
MLP from its python backend under `jax.jit`: one instance, no dynamic batching (the
configuration the issue measured), tensors moved by DLPack both ways (the stub was built
against numpy 1.x and hands back empty tensors for numpy 2 arrays). Its answers are checked
against JAX before it is timed, like every server's.
"""

from __future__ import annotations

import importlib.util
import socket
import subprocess
import sys
import sysconfig
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType

import numpy as np

from tests.bench import models, servers

INSTALLER = servers.ROOT / "tests" / "conformance" / "peers" / "triton_server.py"
VENV = servers.ROOT / "build" / "peers" / "triton"

CONFIG = """name: "{name}"
backend: "python"
max_batch_size: 0
input [ {{ name: "x" data_type: TYPE_FP32 dims: [ {rows}, {n_in} ] }} ]
output [ {{ name: "y" data_type: TYPE_FP32 dims: [ {rows}, {n_out} ] }} ]
instance_group [ {{ count: 1 kind: KIND_CPU }} ]
"""

MODEL_PY = '''"""The bench's MLP under jax.jit in Triton's python backend (tests/bench/triton.py).
"""

import os
import sys

SITE_PACKAGES = {site!r}
if SITE_PACKAGES not in sys.path:
    sys.path.append(SITE_PACKAGES)  # jax and numpy (the stub does not inherit PYTHONPATH)

import jax  # noqa: E402
import numpy as np  # noqa: E402
import triton_python_backend_utils as pb_utils  # noqa: E402


def mlp(params, x):
    return jax.nn.relu(x @ params["w1"] + params["b1"]) @ params["w2"] + params["b2"]


class TritonPythonModel:
    def initialize(self, args):
        saved = np.load(os.path.join(os.path.dirname(os.path.abspath(__file__)), "params.npz"))
        self.params = {{k: jax.device_put(saved[k]) for k in saved.files}}
        self.f = jax.jit(mlp)
        self.f(self.params, np.zeros(({rows}, {n_in}), np.float32)).block_until_ready()

    def execute(self, requests):
        responses = []
        for request in requests:
            x = jax.dlpack.from_dlpack(pb_utils.get_input_tensor_by_name(request, "x"))
            y = self.f(self.params, x)
            responses.append(pb_utils.InferenceResponse(
                output_tensors=[pb_utils.Tensor.from_dlpack("y", y)]))
        return responses
'''


def installer() -> ModuleType:
    """tests/conformance/peers/triton_server.py, loaded by path (it is a script of that suite,
    not a package)."""
    if not INSTALLER.exists():
        raise servers.BenchSetupError(f"{INSTALLER.relative_to(servers.ROOT)} is missing (the "
                                      "Triton installer of make conformance-peers)")
    spec = importlib.util.spec_from_file_location("jaxport_bench_triton_server", INSTALLER)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # (its dataclasses look their module up)
    spec.loader.exec_module(module)
    return module


def write_repository(repo: Path, model: str) -> None:
    """A Triton model repository holding `model` of tests/bench/models.py."""
    m = models.MODELS[model]
    d = repo / model
    (d / "1").mkdir(parents=True, exist_ok=True)
    n_in, _, n_out = m.dims
    (d / "config.pbtxt").write_text(CONFIG.format(name=model, rows=m.rows, n_in=n_in,
                                                  n_out=n_out))
    (d / "1" / "model.py").write_text(MODEL_PY.format(site=sysconfig.get_paths()["purelib"],
                                                      rows=m.rows, n_in=n_in))
    np.savez(d / "1" / "params.npz", **models.mlp_params(m.dims))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def serve(work: Path, model: str) -> Iterator[servers.Server]:
    """Triton serving `model` for the block (installed first when it is not)."""
    triton = installer().install(VENV)
    repo = work / "triton-models"
    write_repository(repo, model)
    port = _free_port()
    log_path = work / "triton.log"
    t0 = time.monotonic()
    with open(log_path, "wb") as logf:
        proc = subprocess.Popen(triton.command(repo, port, _free_port()), stdout=logf,
                                stderr=subprocess.STDOUT)
    try:
        target = f"127.0.0.1:{port}"
        servers.wait_ready(target, [model], proc, t0 + servers.START_TIMEOUT_S, log_path)
        yield servers.Server("triton", target, proc.pid, t0, time.monotonic(), log_path)
    finally:
        servers.stop(proc)
