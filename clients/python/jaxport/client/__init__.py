"""Python client for Open Inference Protocol servers (jaxport bridge, Triton, ...); no JAX."""

from jaxport.client.inference import (
    DEFAULT_MAX_MESSAGE_BYTES,
    InferenceClient,
    InferenceServerError,
    InferResult,
    ModelIndex,
    ModelMetadata,
    ServerMetadata,
    SharedMemoryStatus,
    TensorMetadata,
)
from jaxport.client.shared_memory import SharedMemoryRegion

__all__ = [
    "DEFAULT_MAX_MESSAGE_BYTES",
    "InferResult",
    "InferenceClient",
    "InferenceServerError",
    "ModelIndex",
    "ModelMetadata",
    "ServerMetadata",
    "SharedMemoryRegion",
    "SharedMemoryStatus",
    "TensorMetadata",
]
