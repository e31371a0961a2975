"""The suite models served by KServe's own `ModelServer` (gRPC OIP), through a small
`kserve.Model` that loads each jaxport artifact with `jaxport.artifact.open` and calls it.

    build/peers/kserve/bin/python tests/conformance/peers/kserve_server.py \
        --repository REPO --grpc_port P --http_port H

The adapter does what a user's model class would do and nothing more: inputs as numpy
(`InferInput.as_numpy()`), `Artifact.call`, outputs as `InferOutput`; the artifact's own errors
(unknown/missing input, dtype, a checkify check) are raised as KServe's `InvalidInput`. Both
listeners bind 127.0.0.1 only (KServe binds every interface; patched here for the test run).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import uvicorn

_config_init = uvicorn.Config.__init__


def _local_config(self, app, *args, **kwargs):
    kwargs["host"] = "127.0.0.1"
    _config_init(self, app, *args, **kwargs)


uvicorn.Config.__init__ = _local_config

from kserve import InferOutput, InferRequest, InferResponse, Model, ModelServer  # noqa: E402
from kserve.errors import InvalidInput  # noqa: E402
from kserve.protocol.grpc import server as grpc_server  # noqa: E402

_aio_server = grpc_server.aio.server


def _local_aio_server(*args, **kwargs):
    server = _aio_server(*args, **kwargs)
    add = server.add_insecure_port
    server.add_insecure_port = lambda address: add(address.replace("[::]", "127.0.0.1"))
    return server


grpc_server.aio.server = _local_aio_server

sys.path.insert(0, str(Path(__file__).resolve().parent))
import artifacts  # noqa: E402
from jaxport.artifact.errors import ArtifactError, CheckFailedError  # noqa: E402


class JaxportModel(Model):
    """One jaxport artifact as a KServe model."""

    def __init__(self, name: str, artifact) -> None:
        super().__init__(name)
        self.artifact = artifact
        self.ready = True

    def get_input_types(self) -> list[dict]:
        return artifacts.signature(self.artifact.inputs)

    def get_output_types(self) -> list[dict]:
        return artifacts.signature(self.artifact.outputs)

    async def predict(self, payload: InferRequest, headers=None,
                      response_headers=None) -> InferResponse:
        inputs = {i.name: i.as_numpy() for i in payload.inputs}
        try:
            outputs = self.artifact.call(**inputs)
        except (ArtifactError, CheckFailedError) as exc:
            raise InvalidInput(str(exc)) from exc
        wanted = [o.name for o in payload.request_outputs or []] or list(outputs)
        return InferResponse(
            response_id=payload.id or "", model_name=self.name,
            infer_outputs=[InferOutput(name=n, shape=list(outputs[n].shape),
                                       datatype=artifacts.datatype(outputs[n]),
                                       data=outputs[n]) for n in wanted],
            use_binary_outputs=False,
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repository", type=Path, required=True)
    args, _ = parser.parse_known_args()  # the rest (--grpc_port, --http_port) are KServe's
    models = [JaxportModel(name, art) for name, (_, art) in artifacts.load(args.repository).items()]
    ModelServer(workers=1).start(models)


if __name__ == "__main__":
    main()
