"""The model kit's KServe adapter (tests/conformance/kit/kserve_server.py) for
`make conformance-peers`, with both of KServe's listeners bound to 127.0.0.1 only (KServe binds
every interface; patched here for the test run). Arguments are KServe's:

    build/peers/kserve/bin/python tests/conformance/peers/kserve_server.py \
        --grpc_port P --http_port H
"""

from __future__ import annotations

import runpy
import sys
from pathlib import Path

import uvicorn
from kserve.protocol.grpc import server as grpc_server

KIT_ADAPTER = Path(__file__).resolve().parents[1] / "kit" / "kserve_server.py"

_config_init = uvicorn.Config.__init__


def _local_config(self, app, *args, **kwargs):
    kwargs["host"] = "127.0.0.1"
    _config_init(self, app, *args, **kwargs)


uvicorn.Config.__init__ = _local_config

_aio_server = grpc_server.aio.server


def _local_aio_server(*args, **kwargs):
    server = _aio_server(*args, **kwargs)
    add = server.add_insecure_port
    server.add_insecure_port = lambda address: add(address.replace("[::]", "127.0.0.1"))
    return server


grpc_server.aio.server = _local_aio_server

if __name__ == "__main__":
    sys.argv = [str(KIT_ADAPTER), *sys.argv[1:]]
    runpy.run_path(str(KIT_ADAPTER), run_name="__main__")
