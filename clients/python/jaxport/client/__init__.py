"""Python client for Open Inference Protocol servers (jaxport bridge, Triton, ...); no JAX."""

from jaxport.client.aio import AsyncInferenceClient
from jaxport.client.inference import (
    DEFAULT_MAX_MESSAGE_BYTES,
    DEFAULT_RETRY_POLICY,
    InferenceClient,
    InferenceServerError,
    InferResult,
    ModelIndex,
    ModelMetadata,
    RetryPolicy,
    ServerMetadata,
    SharedMemoryStatus,
    TensorMetadata,
)
from jaxport.client.shared_memory import SharedMemoryRegion

__all__ = [
    "DEFAULT_MAX_MESSAGE_BYTES",
    "DEFAULT_RETRY_POLICY",
    "AsyncInferenceClient",
    "InferResult",
    "InferenceClient",
    "InferenceServerError",
    "ModelIndex",
    "ModelMetadata",
    "RetryPolicy",
    "ServerMetadata",
    "SharedMemoryRegion",
    "SharedMemoryStatus",
    "TensorMetadata",
]
