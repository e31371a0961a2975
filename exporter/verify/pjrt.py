"""The `pjrt` check: the raw `model.mlirbc` of every fixed-shape program compiled by the PJRT
client (no jax.export) and run with arguments bound purely from the manifest order equals the
goldens (a sharded program: one replica, nr_devices partitions)."""

from __future__ import annotations

import jaxport.artifact
import numpy as np
from jaxport.artifact import binding
from jaxport.artifact import sharding as sharding_io
from jaxport.artifact.gen import manifest_pb2
from jaxport.exporter.verify import cases
from jaxport.exporter.verify.reference import f32_reference
from jaxport.exporter.verify.results import CheckResult, result
from jaxport.exporter.verify.tolerances import Comparison

_RES = manifest_pb2.ResultRole


def check(art: jaxport.artifact.Artifact, platform: str) -> CheckResult:
    """Compile each fixed-shape program on `platform` and run it on its cases."""
    import jax
    from jax.extend import backend as jex_backend

    m = art.manifest
    client = jex_backend.get_backend(platform)
    device = client.local_devices()[0]
    mesh = art.mesh()
    # A sharded program: one replica, nr_devices partitions (SPMD), logical device i = the
    # mesh's i-th device, every argument laid out as the manifest's sharding says.
    devices = [device] if mesh is None else list(mesh.devices.flat)
    goldens = art.goldens()
    comps: dict[str, Comparison] = {}
    if not cases.fixed_programs(m):
        return cases.polymorphic_skip("pjrt")
    for program in cases.fixed_programs(m):  # every batch size's or bucket's program
        bytecode = (art.path / program.mlirbc_file).read_bytes()
        try:
            executable = client.compile_and_load(
                bytecode, devices,
                jex_backend.get_compile_options(
                    num_replicas=1, num_partitions=len(devices),
                    device_assignment=np.array([[d.id for d in devices]])),
            )
        except Exception as exc:
            first = (str(exc).strip().splitlines() or [""])[0]
            return CheckResult("pjrt", "fail",
                               f"PJRT cannot compile {program.mlirbc_file}: {first}")
        params = art.parameters()
        refs = f32_reference(art, program, cases.program_cases(goldens, program))
        # Where each argument goes: the device, or its manifest sharding on the mesh.
        places = [device if mesh is None else sharding_io.named_sharding(mesh, a.sharding)
                  for a in program.arguments]
        for case in cases.program_cases(goldens, program):
            values = binding.main_arguments(m, program, params, case.inputs, platform)
            buffers = [jax.device_put(v, place)
                       for v, place in zip(values, places, strict=True)]
            out = executable.execute_sharded(buffers).disassemble_into_single_device_arrays()
            if mesh is None:
                results = [np.asarray(o[0]) for o in out]
            else:  # each result's shards, assembled as its manifest sharding says
                plain = [r for r in program.results if r.role != _RES.RESULT_ROLE_TOKEN]
                results = [np.asarray(jax.make_array_from_single_device_arrays(
                    tuple(r.shape), sharding_io.named_sharding(mesh, r.sharding), shards))
                    for r, shards in zip(plain, out, strict=True)]
            cases.compare_case(program, results, cases.expected(case), comps, refs.get(case.name))
    detail = cases.detail(goldens, m, cases.fixed_programs(m))
    return result("pjrt", comps, detail + cases.where(m, platform))
