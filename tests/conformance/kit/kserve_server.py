"""Example adapter: the conformance suite's models served by KServe's `ModelServer` (OIP over
gRPC and REST) from the kit's numpy reference definitions (reference.py), no jaxport needed.

    pip install 'kserve==0.21.*'
    python kserve_server.py --grpc_port 8081 --http_port 8080     # KServe's own flags
    jaxport-conformance --url 127.0.0.1:8081 --features jaxport-models,bf16,checkify

What a user's model class does and nothing more: inputs as numpy (`InferInput.as_numpy()`),
`ReferenceModel.run` (names and datatypes checked, shapes against the metadata left to
the server, which the suite measures; then compute), outputs as `InferOutput`; a wrong input
name or datatype or a tripped check is KServe's `InvalidInput` (400 / INVALID_ARGUMENT).
KServe binds every interface. `make conformance-peers` serves KServe with this file (through
tests/conformance/peers/kserve_server.py, which binds it to 127.0.0.1).
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
from kserve import InferOutput, InferRequest, InferResponse, Model, ModelServer
from kserve.errors import InvalidInput

sys.path.insert(0, str(Path(__file__).resolve().parent))
import reference


def kit_array(array: np.ndarray, datatype: str) -> np.ndarray:
    """A decoded input as the kit takes it: BF16 as its uint16 bit patterns."""
    if datatype == "BF16" and array.dtype != np.dtype("<u2"):
        return np.asarray(array).view("<u2")
    return array


class SuiteModel(Model):
    """One reference model as a KServe model."""

    def __init__(self, model: reference.ReferenceModel) -> None:
        super().__init__(model.name)
        self.model = model
        self.ready = True

    def get_input_types(self) -> list[dict]:
        return [{"name": t.name, "datatype": t.datatype, "shape": list(t.shape)}
                for t in self.model.inputs]

    def get_output_types(self) -> list[dict]:
        return [{"name": t.name, "datatype": t.datatype, "shape": list(t.shape)}
                for t in self.model.outputs]

    async def predict(self, payload: InferRequest, headers=None,
                      response_headers=None) -> InferResponse:
        inputs = {i.name: kit_array(i.as_numpy(), i.datatype) for i in payload.inputs}
        try:
            outputs = self.model.run(inputs, check_shapes=False)  # the server's job
        except reference.InvalidInput as exc:
            raise InvalidInput(str(exc)) from exc
        datatypes = {t.name: t.datatype for t in self.model.outputs}
        wanted = [o.name for o in payload.request_outputs or []] or list(outputs)
        return InferResponse(
            response_id=payload.id or "", model_name=self.name,
            infer_outputs=[InferOutput(name=n, shape=list(outputs[n].shape),
                                       datatype=datatypes[n], data=outputs[n]) for n in wanted],
            use_binary_outputs=False,
        )


if __name__ == "__main__":
    ModelServer(workers=1).start([SuiteModel(m) for m in reference.MODELS.values()])
