"""A small, real Open Inference Protocol gRPC server for the client's transport tests.

Run as a separate process (`python oip_test_server.py [--token T] [--tls-dir D]`); it binds
127.0.0.1:0 and prints `PORT <n>` once serving. It serves one model, "echo", that returns
every input unchanged under the same name (requested outputs honoured; request parameter
`sleep_s` delays the answer), so the tests can
check what the client put on the wire, status codes and messages, metadata, size limits,
streaming, TLS and tokens without JAX. The real bridge is exercised by tests/bridge and
tests/conformance; this server only exists so the client is tested against a real socket.
"""

from __future__ import annotations

import argparse
import sys
import threading
import time
from concurrent import futures
from pathlib import Path

import grpc
from jaxport.protocol import codecs
from jaxport.protocol.errors import (
    InvalidArgumentError,
    NotFoundError,
    ProtocolError,
    UnavailableError,
)
from jaxport.protocol.gen.inference import grpc_service_pb2 as pb
from jaxport.protocol.gen.inference import grpc_service_pb2_grpc as pb_grpc
from jaxport.protocol.gen.inference import model_config_pb2

MODEL = "echo"
MAX_BYTES = 512 * 1024 * 1024


class EchoServicer(pb_grpc.GRPCInferenceServiceServicer):
    def __init__(self, token: str | None) -> None:
        self.token = token
        self.loaded = True
        self.lock = threading.Lock()

    def _admit(self, context: grpc.ServicerContext) -> None:
        if self.token is None:
            return
        metadata = dict(context.invocation_metadata())
        if metadata.get("authorization") != f"Bearer {self.token}":
            context.abort(grpc.StatusCode.UNAUTHENTICATED, "missing or invalid bearer token")

    def _model(self, name: str, context: grpc.ServicerContext) -> None:
        if name != MODEL:
            raise NotFoundError(f"model '{name}' not found; available: {MODEL}")
        if not self.loaded:
            raise UnavailableError(f"model '{name}' is not loaded")

    def _infer(self, request: pb.ModelInferRequest, context) -> pb.ModelInferResponse:
        self._model(request.model_name, context)
        if request.model_version not in ("", "1"):
            raise NotFoundError(f"model '{MODEL}' has no version '{request.model_version}'")
        inputs = codecs.decode_request_inputs(request)
        wanted = codecs.requested_output_names(request)
        if wanted is not None:
            unknown = [n for n in wanted if n not in inputs]
            if unknown:
                raise InvalidArgumentError(f"unknown requested output '{unknown[0]}'")
            inputs = {n: inputs[n] for n in wanted}
        params = codecs.from_parameters(request.parameters)
        if "sleep_s" in params:  # lets the tests hit a deadline deterministically
            time.sleep(float(params["sleep_s"]))
        return codecs.encode_infer_response(
            inputs, model_name=MODEL, model_version="1", request_id=request.id, parameters=params
        )

    def _guard(self, fn, request, context):
        self._admit(context)
        try:
            return fn(request, context)
        except ProtocolError as exc:
            code = grpc.StatusCode.__members__.get(exc.code, grpc.StatusCode.INVALID_ARGUMENT)
            context.abort(code, exc.message)

    def ServerLive(self, request, context):
        return self._guard(lambda r, c: pb.ServerLiveResponse(live=True), request, context)

    def ServerReady(self, request, context):
        return self._guard(lambda r, c: pb.ServerReadyResponse(ready=True), request, context)

    def ModelReady(self, request, context):
        def ready(r, c):
            return pb.ModelReadyResponse(ready=r.name == MODEL and self.loaded)

        return self._guard(ready, request, context)

    def ServerMetadata(self, request, context):
        def meta(r, c):
            return pb.ServerMetadataResponse(
                name="oip-test", version="0", extensions=["model_repository"]
            )

        return self._guard(meta, request, context)

    def ModelMetadata(self, request, context):
        def meta(r, c):
            self._model(r.name, c)
            tensor = pb.ModelMetadataResponse.TensorMetadata
            t = [tensor(name="x", datatype="FP32", shape=[-1, 3]),
                 tensor(name="h", datatype="BF16", shape=[-1])]
            return pb.ModelMetadataResponse(
                name=MODEL, versions=["1"], platform="echo", inputs=t, outputs=t
            )

        return self._guard(meta, request, context)

    def ModelConfig(self, request, context):
        def config(r, c):
            self._model(r.name, c)
            cfg = model_config_pb2.ModelConfig(name=MODEL, platform="echo", max_batch_size=0)
            cfg.input.add(name="x", data_type=model_config_pb2.TYPE_FP32, dims=[-1, 3])
            return pb.ModelConfigResponse(config=cfg)

        return self._guard(config, request, context)

    def ModelStatistics(self, request, context):
        def stats(r, c):
            return pb.ModelStatisticsResponse(model_stats=[pb.ModelStatistics(name=MODEL)])

        return self._guard(stats, request, context)

    def ModelInfer(self, request, context):
        return self._guard(self._infer, request, context)

    def ModelStreamInfer(self, request_iterator, context):
        self._admit(context)
        for request in request_iterator:
            try:
                yield pb.ModelStreamInferResponse(infer_response=self._infer(request, context))
            except ProtocolError as exc:
                yield pb.ModelStreamInferResponse(
                    error_message=f"{exc.code}: {exc.message}",  # as the bridge words it
                    infer_response=pb.ModelInferResponse(id=request.id),
                )

    def RepositoryIndex(self, request, context):
        def index(r, c):
            state = "READY" if self.loaded else "UNAVAILABLE"
            models = [] if (r.ready and not self.loaded) else [
                pb.RepositoryIndexResponse.ModelIndex(name=MODEL, version="1", state=state)
            ]
            return pb.RepositoryIndexResponse(models=models)

        return self._guard(index, request, context)

    def RepositoryModelLoad(self, request, context):
        def load(r, c):
            if r.model_name != MODEL:
                raise NotFoundError(f"model '{r.model_name}' is not in the repository")
            self.loaded = True
            return pb.RepositoryModelLoadResponse()

        return self._guard(load, request, context)

    def RepositoryModelUnload(self, request, context):
        def unload(r, c):
            if r.model_name != MODEL:
                raise NotFoundError(f"model '{r.model_name}' is not in the repository")
            self.loaded = False
            return pb.RepositoryModelUnloadResponse()

        return self._guard(unload, request, context)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--token")
    parser.add_argument("--tls-ca", type=Path, help="CA that client certificates must chain to")
    parser.add_argument("--tls-cert", type=Path, help="server certificate (PEM)")
    parser.add_argument("--tls-key", type=Path, help="server key (PEM); with all three: mTLS")
    args = parser.parse_args()
    server = grpc.server(
        futures.ThreadPoolExecutor(max_workers=4),
        options=[
            ("grpc.max_send_message_length", MAX_BYTES),
            ("grpc.max_receive_message_length", MAX_BYTES),
        ],
    )
    pb_grpc.add_GRPCInferenceServiceServicer_to_server(EchoServicer(args.token), server)
    if args.tls_cert is not None:
        credentials = grpc.ssl_server_credentials(
            [(args.tls_key.read_bytes(), args.tls_cert.read_bytes())],
            root_certificates=args.tls_ca.read_bytes(),
            require_client_auth=True,
        )
        port = server.add_secure_port("127.0.0.1:0", credentials)
    else:
        port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    print(f"PORT {port}", flush=True)
    server.wait_for_termination()


if __name__ == "__main__":
    sys.exit(main())
