#!/usr/bin/env python3
"""Python runner of the conformance suite in the jaxport tree: every case file against one live
OIP server, through jaxport.client.

    python tests/conformance/runner.py --url 127.0.0.1:8001 [--cases DIR] [--features LIST]
                                       [--ca CA.pem] [--cert C.pem --key K.pem] [--token TOKEN]
                                       [--json FILE] [--junit FILE] [--async]

The runner itself (cases, features, judging, reports, every flag) is the jaxport-conformance
package beside this file (`jaxport_conformance`, the wheel `make conformance-dist` builds); this
file adds what only the jaxport tree has: well-formed requests, health, metadata and plain
streams go through `jaxport.client.InferenceClient`, the client a Python service would use
(requests a client refuses to build on purpose go through the generated stub either way, see
jaxport_conformance.grpc_runner). Prints one PASS/FAIL/N/A line per case and `conformance
python: N passed, M failed[, K not applicable]`; exits 1 if any case failed.

With `--async` the same cases run through `jaxport.client.AsyncInferenceClient` (grpc.aio) and
the generated stub on the same aio channel (summary `conformance python-async: ...`).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import threading
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

import grpc  # noqa: E402
from jaxport.client import AsyncInferenceClient, InferenceClient, InferenceServerError  # noqa: E402
from jaxport.protocol import dtypes  # noqa: E402
from jaxport.protocol.gen.inference import grpc_service_pb2_grpc as pb_grpc  # noqa: E402
from jaxport_conformance import cli  # noqa: E402
from jaxport_conformance.grpc_runner import Runner  # noqa: E402
from jaxport_conformance.suite import (  # noqa: E402, F401  (this module's names, for tests)
    CALL_TIMEOUT_S,
    DEFAULT_CASES,
    CaseFailure,
    ServerError,
    check_error,
    compare_outputs,
    compare_tensor,
    features_file,
    load_cases,
    load_features,
    missing_features,
    tensor_bytes,
)

FEATURES, EXTENSION_FEATURES = load_features(features_file(DEFAULT_CASES))


def as_array(datatype: str, shape: list[int], data: bytes) -> Any:
    """A case tensor as the array jaxport.client sends (BF16 as ml_dtypes.bfloat16)."""
    import numpy as np
    return np.frombuffer(data, dtype=dtypes.by_datatype(datatype).numpy).reshape(shape)


class AsyncAdapter:
    """An AsyncInferenceClient behind the blocking calls the Runner makes: each call is awaited
    on one event loop running in a background thread, so a `parallel` case still has N requests
    in flight at once (on that loop). The aio channel and client are created on the loop."""

    def __init__(self, make_channel: Callable[[], grpc.aio.Channel], token: str | None) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._thread.start()

        async def make() -> AsyncInferenceClient:
            return AsyncInferenceClient(channel=make_channel(), token=token)

        self.client = self.run(make)

    def run(self, fn: Callable[[], Awaitable[Any]]) -> Any:
        """Call fn on the loop and wait for the result of what it returns."""
        async def call() -> Any:
            return await fn()
        return asyncio.run_coroutine_threadsafe(call(), self._loop).result()

    def __getattr__(self, name: str) -> Callable[..., Any]:
        method = getattr(self.client, name)

        def blocking(*args: Any, **kwargs: Any) -> Any:
            if name == "stream_infer":
                async def collect() -> list[Any]:
                    return [r async for r in method(*args, **kwargs)]
                return self.run(collect)
            return self.run(lambda: method(*args, **kwargs))
        return blocking

    def blocking_stub(self) -> Any:
        """The generated stub on the client's aio channel, awaited per call."""
        stub = pb_grpc.GRPCInferenceServiceStub(self.client.channel)
        adapter = self

        class Stub:
            def __getattr__(self, name: str) -> Callable[..., Any]:
                method = getattr(stub, name)

                def unary(request: Any, **kwargs: Any) -> Any:
                    return adapter.run(lambda: method(request, **kwargs))
                return unary

            def ModelStreamInfer(self, requests: Any, **kwargs: Any) -> Any:
                async def collect() -> list[Any]:
                    return [r async for r in stub.ModelStreamInfer(requests, **kwargs)]
                return adapter.run(collect)
        return Stub()

    def close(self) -> None:
        async def close_channel() -> None:
            await self.client.channel.close()
        self.run(close_channel)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join()
        self._loop.close()


def jaxport_runner(args: argparse.Namespace, options: list[tuple[str, int]], credentials: Any,
                   metadata: tuple[tuple[str, str], ...]
                   ) -> tuple[str, Runner, Callable[[], None]]:
    """The package's Runner with jaxport.client (or its asyncio client) on the run's channel,
    which the raw stub shares."""
    errors = (ServerError, InferenceServerError)
    if args.use_async:
        def make_channel() -> grpc.aio.Channel:
            if credentials is not None:
                return grpc.aio.secure_channel(args.url, credentials, options=options)
            return grpc.aio.insecure_channel(args.url, options=options)

        adapter = AsyncAdapter(make_channel, args.token)
        return ("python-async", Runner(adapter.blocking_stub(), metadata, adapter, errors,
                                       as_array), adapter.close)
    channel = (grpc.secure_channel(args.url, credentials, options=options)
               if credentials is not None else grpc.insecure_channel(args.url, options=options))
    client = InferenceClient(channel=channel, token=args.token)
    return ("python", Runner(pb_grpc.GRPCInferenceServiceStub(channel), metadata, client, errors,
                             as_array), channel.close)


def main(argv: list[str] | None = None) -> int:
    """Run every case (jaxport_conformance.cli.main with jaxport.client); 0 only if none
    failed."""
    parser = cli.parser("runner.py")
    parser.add_argument("--async", dest="use_async", action="store_true",
                        help="run the cases through AsyncInferenceClient (grpc.aio)")
    return cli.main(argv, arg_parser=parser, grpc_factory=jaxport_runner)


if __name__ == "__main__":
    sys.exit(main())
