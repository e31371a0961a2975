"""The transport floor: `jaxport.bridge.worker` with ModelInfer answered from a cache (the
response the real servicer gave to the first request of that model, version and id; the bench
gives every distinct payload its own id).

    python -m tests.bench.front_launch BINARY "python -m tests.bench.floor_worker" \
        --repository ... [flags]      (tests.bench.front_launch.command builds this line)

Everything else is the real worker and the real front: framing, leader/followers, memfds, the
request parsed, the response serialized. What it measures is the stack `jaxport serve` runs
(front + worker transport) without the model core's Python (validation, admission,
statistics, execution, encoding). Every other method (ModelReady, ModelStatistics, ...) is
the real servicer's. Benchmark use only.
"""

from __future__ import annotations

import dataclasses
import sys
from typing import Any

from jaxport.bridge import worker
from jaxport.bridge.connection import Method


def _cached_methods(servicer: Any) -> list[Method]:
    methods = _real_service_methods(servicer)
    for i, method in enumerate(methods):
        if method.name != "ModelInfer":
            continue
        cache: dict[tuple[str, str, str], Any] = {}
        handler = method.handler

        def cached(request: Any, context: Any, handler: Any = handler,
                   cache: dict[tuple[str, str, str], Any] = cache) -> Any:
            key = (request.model_name, request.model_version, request.id)
            response = cache.get(key)
            if response is None:
                response = cache[key] = handler(request, context)
            return response

        methods[i] = dataclasses.replace(method, handler=cached)
    return methods


_real_service_methods = worker.service_methods
worker.service_methods = _cached_methods  # read (from worker's globals) by Worker.__init__

if __name__ == "__main__":
    sys.exit(worker.main())
