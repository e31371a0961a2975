"""Example adapter: the conformance suite's models served by MLServer from the kit's numpy
reference definitions (reference.py), no jaxport needed.

    pip install mlserver==1.7.1
    python mlserver_runtime.py settings/          # writes settings/<model>/model-settings.json
    cp reference.py mlserver_runtime.py settings/ && cd settings && mlserver start .
    jaxport-conformance --url 127.0.0.1:8081 \
        --features jaxport-models,bf16,checkify,versions,triton-stream

`SuiteRuntime` does what a user's runtime would do and nothing more: inputs decoded by
MLServer's `NumpyCodec`, `ReferenceModel.run` (names and datatypes checked, shapes against the
metadata left to the server, which the suite measures; then compute), outputs encoded by
`NumpyCodec`; a wrong input name or datatype or a tripped check is a 400 `MLServerError`.
`write_settings` gives each model its model-settings.json (this class, version "1", the OIP
signature) and a settings.json allowing the 16 MiB case (MLServer's default gRPC limit is
4 MiB). `make conformance-peers` serves MLServer with this file
(tests/conformance/peers/run_peers.py).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import reference


def signature(tensors: tuple[reference.Tensor, ...]) -> list[dict]:
    return [{"name": t.name, "datatype": t.datatype, "shape": list(t.shape)} for t in tensors]


def write_settings(root: Path, grpc_port: int = 8081, http_port: int = 8080) -> None:
    """settings.json (127.0.0.1, the ports, no worker pool) and one model-settings.json each."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "settings.json").write_text(json.dumps({
        "host": "127.0.0.1", "grpc_port": grpc_port, "http_port": http_port,
        "parallel_workers": 0, "load_models_at_startup": True,
        "grpc_max_message_length": 64 << 20}, indent=2))
    for model in reference.MODELS.values():
        (root / model.name).mkdir(exist_ok=True)
        (root / model.name / "model-settings.json").write_text(json.dumps({
            "name": model.name, "implementation": "mlserver_runtime.SuiteRuntime",
            "inputs": signature(model.inputs), "outputs": signature(model.outputs),
            "parameters": {"version": "1"}}, indent=2))


try:
    from mlserver import MLModel
    from mlserver.codecs import NumpyCodec
    from mlserver.errors import MLServerError
    from mlserver.types import InferenceRequest, InferenceResponse
except ImportError:  # write_settings works without MLServer installed
    MLModel = object  # type: ignore[assignment,misc]


class SuiteRuntime(MLModel):  # type: ignore[misc,valid-type]
    """One reference model (by the model-settings name) as an MLServer model."""

    async def load(self) -> bool:
        self.model = reference.MODELS[self.name]
        return True

    async def predict(self, payload: InferenceRequest) -> InferenceResponse:
        inputs = {}
        for i in payload.inputs:
            array = NumpyCodec.decode_input(i)
            if i.datatype == "BF16" and array.dtype != np.dtype("<u2"):
                array = np.asarray(array).view("<u2")  # the kit takes BF16 as bit patterns
            inputs[i.name] = array
        try:
            outputs = self.model.run(inputs, check_shapes=False)  # the server's job
        except reference.InvalidInput as exc:
            raise MLServerError(str(exc), status_code=400) from exc
        wanted = [o.name for o in payload.outputs or []] or list(outputs)
        return InferenceResponse(
            model_name=self.name, model_version=self.version, id=payload.id,
            outputs=[NumpyCodec.encode_output(name=n, payload=outputs[n]) for n in wanted],
        )


if __name__ == "__main__":
    write_settings(Path(sys.argv[1] if len(sys.argv) > 1 else "settings"))
