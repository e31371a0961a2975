"""The float32 reference of a low-precision program (worker side): the program's StableHLO text
with every bf16/f16 type widened to f32, compiled by PJRT and run on the golden cases, so that
bf16/f16 outputs are judged against it too (`tolerances.compare`)."""

from __future__ import annotations

import re
from collections.abc import Sequence

import jaxport.artifact
import numpy as np
from jaxport.artifact import binding
from jaxport.artifact.gen import manifest_pb2
from jaxport.exporter.verify import tolerances
from jaxport.exporter.verify.tolerances import LOW_PRECISION

__all__ = ["f32_module_text", "f32_reference"]

_RES = manifest_pb2.ResultRole

_HEX_LOW = re.compile(r'dense<"0x([0-9A-Fa-f]+)">(\s*:\s*tensor<(?:[0-9]+x)*)(bf16|f16)>')
_LOW_TYPE = re.compile(r"(?<=[<x\s(,])b?f16(?!\w)")


def f32_module_text(text: str) -> str:
    """The StableHLO text with every bf16/f16 type (and constant) widened to f32."""
    import ml_dtypes

    def widen(m: re.Match[str]) -> str:
        src = ml_dtypes.bfloat16 if m.group(3) == "bf16" else np.float16
        data = np.frombuffer(bytes.fromhex(m.group(1)), src).astype("<f4")
        return f'dense<"0x{data.tobytes().hex().upper()}">{m.group(2)}f32>'

    return _LOW_TYPE.sub("f32", _HEX_LOW.sub(widen, text))


def _low_precision_results(program: manifest_pb2.Program) -> bool:
    return any(r.dtype.numpy in LOW_PRECISION for r in program.results)


def f32_reference(art: jaxport.artifact.Artifact, program: manifest_pb2.Program,
                  cases: Sequence[jaxport.artifact.Golden]) -> dict[str, dict[str, np.ndarray]]:
    """{case: {result: float32 array}}: the program's text with bf16/f16 widened to f32,
    compiled by PJRT and run on the case (low-precision arguments widened exactly).

    Empty when the program has no low-precision result, cannot be widened or is sharded (then
    the plain tolerance applies).
    """
    if not _low_precision_results(program) or program.polymorphic \
            or "cpu" not in art.manifest.platforms \
            or tolerances.override() is not None or art.manifest.nr_devices > 1:  # one device
        return {}
    import jax
    from jax.extend import backend as jex_backend

    client = jex_backend.get_backend("cpu")
    device = client.local_devices()[0]
    try:
        text = f32_module_text((art.path / program.mlir_file).read_text())
        executable = client.compile_and_load(
            text.encode(), [device],
            jex_backend.get_compile_options(num_replicas=1, num_partitions=1))
    except Exception:  # e.g. a bitcast of bf16 bits: no f32 twin; plain tolerance applies
        return {}
    params = art.parameters()
    refs: dict[str, dict[str, np.ndarray]] = {}
    names = [r.name for r in program.results if r.role != _RES.RESULT_ROLE_TOKEN]
    for case in cases:
        values = []
        bound = binding.main_arguments(art.manifest, program, params, case.inputs, "cpu")
        for arg, v in zip(program.arguments, bound, strict=True):
            v = np.asarray(v)
            values.append(v.astype(np.float32) if arg.dtype.numpy in LOW_PRECISION else v)
        out = executable.execute_sharded([jax.device_put(v, device) for v in values]) \
            .disassemble_into_single_device_arrays()
        refs[case.name] = {n: np.asarray(o[0]) for n, o in zip(names, out, strict=True)}
    return refs
