"""gRPC's retry policy (`retry=RetryPolicy(...)`) across a server restart on the same port: with
retries on the request survives, with them off it fails at once with UNAVAILABLE.

The server is a small in-process OIP server (the restart is of a gRPC server, which is what the
channel sees of a bridge restart). The server is started again only once the client's channel
has reported TRANSIENT_FAILURE with the call still pending, i.e. after an attempt has failed,
never after a guessed sleep.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor

import grpc
import grpc.aio
import numpy as np
import pytest
from jaxport.client import (
    DEFAULT_RETRY_POLICY,
    AsyncInferenceClient,
    InferenceClient,
    InferenceServerError,
    RetryPolicy,
)
from jaxport.protocol.gen.inference import grpc_service_pb2 as pb
from jaxport.protocol.gen.inference import grpc_service_pb2_grpc as pb_grpc

#: Backoff well above the reconnect backoff the policy sets (100 ms), so retries outlast it.
POLICY = RetryPolicy(max_attempts=5, initial_backoff_s=0.5, max_backoff_s=2.0,
                     backoff_multiplier=2.0)
X = {"x": np.arange(3, dtype=np.float32)}


class Echo(pb_grpc.GRPCInferenceServiceServicer):
    def ModelInfer(self, request: pb.ModelInferRequest, context: grpc.ServicerContext
                   ) -> pb.ModelInferResponse:
        response = pb.ModelInferResponse(model_name=request.model_name, id=request.id)
        for tensor, raw in zip(request.inputs, request.raw_input_contents, strict=True):
            response.outputs.add(name="y", datatype=tensor.datatype, shape=tensor.shape)
            response.raw_output_contents.append(raw)
        return response


class RestartableServer:
    """An Echo server on 127.0.0.1 that can stop and start again on the same port."""

    def __init__(self) -> None:
        self.port = 0
        self._server: grpc.Server | None = None
        self.start()

    def start(self) -> None:
        server = grpc.server(ThreadPoolExecutor(max_workers=2))
        pb_grpc.add_GRPCInferenceServiceServicer_to_server(Echo(), server)
        port = server.add_insecure_port(f"127.0.0.1:{self.port}")
        assert port and (self.port in (0, port)), f"could not bind 127.0.0.1:{self.port}"
        self.port = port
        server.start()
        self._server = server

    def stop(self) -> None:
        if self._server is not None:
            self._server.stop(None).wait()
            self._server = None

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"


@pytest.fixture
def server() -> Iterator[RestartableServer]:
    s = RestartableServer()
    try:
        yield s
    finally:
        s.stop()


class States:
    """The channel's connectivity states as they are reported."""

    def __init__(self, channel: grpc.Channel) -> None:
        self.current: grpc.ChannelConnectivity | None = None
        self._changed = threading.Condition()
        channel.subscribe(self._update, try_to_connect=False)

    def _update(self, state: grpc.ChannelConnectivity) -> None:
        with self._changed:
            self.current = state
            self._changed.notify_all()

    def wait(self, predicate, what: str, timeout: float = 120.0) -> None:
        with self._changed:
            if not self._changed.wait_for(lambda: predicate(self.current), timeout):
                raise AssertionError(f"channel never became {what} (state {self.current})")


def infer_across_restart(server: RestartableServer, retry: RetryPolicy | None
                         ) -> tuple[Future, bool]:
    """Stop the server, start an inference, restart the server once an attempt has failed.
    Returns the call's future and whether the call was still pending at the restart."""
    client = InferenceClient(server.address, timeout=30, retry=retry)
    states = States(client.channel)
    try:
        assert client.infer("echo", X)["y"].tolist() == [0, 1, 2]
        server.stop()
        # The call below must meet a server that is down, not a connection being torn down.
        states.wait(lambda s: s is not grpc.ChannelConnectivity.READY, "not READY")
        with ThreadPoolExecutor(max_workers=1) as pool:
            call = pool.submit(client.infer, "echo", X)
            call.add_done_callback(lambda _: states._update(states.current))
            states.wait(lambda s: call.done() or s is grpc.ChannelConnectivity.TRANSIENT_FAILURE,
                        "TRANSIENT_FAILURE")
            pending = not call.done()
            if pending:
                server.start()
            call.exception(timeout=120)  # the call's own 30 s deadline ends it before this
        return call, pending
    finally:
        client.close()


def test_with_retries_a_request_survives_a_restart(server: RestartableServer) -> None:
    call, pending = infer_across_restart(server, POLICY)
    assert pending, "the call ended before the server was restarted: nothing was retried"
    assert call.result()["y"].tolist() == [0, 1, 2]


def test_without_retries_a_request_fails_fast(server: RestartableServer) -> None:
    call, _ = infer_across_restart(server, None)
    assert isinstance(call.exception(), InferenceServerError)
    # Fast = on the failed attempt: UNAVAILABLE, not DEADLINE_EXCEEDED after waiting out its
    # 30 s deadline (which a retrying or wait-for-ready call would show). The code proves it;
    # a clock bound (< 5 s) only suggested it, and a loaded machine could break it.
    assert call.exception().code == "UNAVAILABLE"


def test_async_client_with_retries_survives_a_restart(server: RestartableServer) -> None:
    async def main() -> bool:
        async with AsyncInferenceClient(server.address, timeout=30, retry=POLICY) as client:
            assert (await client.infer("echo", X))["y"].tolist() == [0, 1, 2]
            server.stop()
            channel = client.channel
            state = channel.get_state()
            while state is grpc.ChannelConnectivity.READY:
                await channel.wait_for_state_change(state)
                state = channel.get_state()
            call = asyncio.ensure_future(client.infer("echo", X))
            while not call.done() and state is not grpc.ChannelConnectivity.TRANSIENT_FAILURE:
                change = asyncio.ensure_future(channel.wait_for_state_change(state))
                await asyncio.wait([call, change], return_when=asyncio.FIRST_COMPLETED)
                change.cancel()
                state = channel.get_state()
            pending = not call.done()
            if pending:
                server.start()
            assert (await call)["y"].tolist() == [0, 1, 2]
            return pending
    assert asyncio.run(main()), "the call ended before the server was restarted"


def test_the_service_config() -> None:
    config = json.loads(DEFAULT_RETRY_POLICY.service_config())
    every, reads, stream = config["methodConfig"]
    assert every["name"] == [{"service": "inference.GRPCInferenceService"}]
    assert every["retryPolicy"]["retryableStatusCodes"] == ["UNAVAILABLE"]
    assert {"service": "inference.GRPCInferenceService", "method": "ModelMetadata"} in reads["name"]
    assert reads["retryPolicy"]["retryableStatusCodes"] == ["UNAVAILABLE", "DEADLINE_EXCEEDED"]
    assert "retryPolicy" not in stream
    assert every["retryPolicy"]["maxAttempts"] == 5
    with pytest.raises(ValueError, match=r"max_attempts must be 2\.\.5"):
        RetryPolicy(max_attempts=9)
    with pytest.raises(ValueError, match="initial_backoff_s"):
        RetryPolicy(initial_backoff_s=5, max_backoff_s=1)
