"""The suite models served by MLServer: a small `MLModel` runtime that loads one jaxport
artifact with `jaxport.artifact.open` (model-settings.json `parameters.uri`) and calls it.

run_peers.py writes, for each suite model, `<settings>/<model>/model-settings.json` naming this
class (`mlserver_runtime.JaxportRuntime`), the artifact directory, version "1" and the model's
OIP signature from its manifest; then `mlserver start <settings>` serves them on 127.0.0.1.
The runtime does what a user's runtime would do and nothing more: inputs decoded by MLServer's
`NumpyCodec`, `Artifact.call`, outputs encoded by `NumpyCodec`; the artifact's own errors
(unknown/missing input, dtype, a checkify check) are raised as a 400 `MLServerError`.
"""

from __future__ import annotations

from jaxport.artifact import open as open_artifact
from jaxport.artifact.errors import ArtifactError, CheckFailedError
from mlserver import MLModel
from mlserver.codecs import NumpyCodec
from mlserver.errors import MLServerError
from mlserver.types import InferenceRequest, InferenceResponse


class JaxportRuntime(MLModel):
    """One jaxport artifact as an MLServer model."""

    async def load(self) -> bool:
        self.artifact = open_artifact(self.settings.parameters.uri)
        return True

    async def predict(self, payload: InferenceRequest) -> InferenceResponse:
        inputs = {i.name: NumpyCodec.decode_input(i) for i in payload.inputs}
        try:
            outputs = self.artifact.call(**inputs)
        except (ArtifactError, CheckFailedError) as exc:
            raise MLServerError(str(exc), status_code=400) from exc
        wanted = [o.name for o in payload.outputs or []] or list(outputs)
        return InferenceResponse(
            model_name=self.name, model_version=self.version, id=payload.id,
            outputs=[NumpyCodec.encode_output(name=n, payload=outputs[n]) for n in wanted],
        )
