from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ArgumentRole(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    ARGUMENT_ROLE_UNSPECIFIED: _ClassVar[ArgumentRole]
    ARGUMENT_ROLE_PARAMETER: _ClassVar[ArgumentRole]
    ARGUMENT_ROLE_INPUT: _ClassVar[ArgumentRole]
    ARGUMENT_ROLE_PLATFORM_INDEX: _ClassVar[ArgumentRole]
    ARGUMENT_ROLE_TOKEN: _ClassVar[ArgumentRole]

class ResultRole(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    RESULT_ROLE_UNSPECIFIED: _ClassVar[ResultRole]
    RESULT_ROLE_OUTPUT: _ClassVar[ResultRole]
    RESULT_ROLE_CHECK: _ClassVar[ResultRole]
    RESULT_ROLE_TOKEN: _ClassVar[ResultRole]
ARGUMENT_ROLE_UNSPECIFIED: ArgumentRole
ARGUMENT_ROLE_PARAMETER: ArgumentRole
ARGUMENT_ROLE_INPUT: ArgumentRole
ARGUMENT_ROLE_PLATFORM_INDEX: ArgumentRole
ARGUMENT_ROLE_TOKEN: ArgumentRole
RESULT_ROLE_UNSPECIFIED: ResultRole
RESULT_ROLE_OUTPUT: ResultRole
RESULT_ROLE_CHECK: ResultRole
RESULT_ROLE_TOKEN: ResultRole

class Manifest(_message.Message):
    __slots__ = ("schema_version", "name", "source_function", "versions", "platforms", "nr_devices", "programs", "dropped_leaves", "inputs", "outputs", "files", "goldens", "checks", "batching", "vjp_order", "allowed_custom_calls", "exported_at", "dimensions", "padding", "mesh", "dropped_state")
    SCHEMA_VERSION_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    SOURCE_FUNCTION_FIELD_NUMBER: _ClassVar[int]
    VERSIONS_FIELD_NUMBER: _ClassVar[int]
    PLATFORMS_FIELD_NUMBER: _ClassVar[int]
    NR_DEVICES_FIELD_NUMBER: _ClassVar[int]
    PROGRAMS_FIELD_NUMBER: _ClassVar[int]
    DROPPED_LEAVES_FIELD_NUMBER: _ClassVar[int]
    INPUTS_FIELD_NUMBER: _ClassVar[int]
    OUTPUTS_FIELD_NUMBER: _ClassVar[int]
    FILES_FIELD_NUMBER: _ClassVar[int]
    GOLDENS_FIELD_NUMBER: _ClassVar[int]
    CHECKS_FIELD_NUMBER: _ClassVar[int]
    BATCHING_FIELD_NUMBER: _ClassVar[int]
    VJP_ORDER_FIELD_NUMBER: _ClassVar[int]
    ALLOWED_CUSTOM_CALLS_FIELD_NUMBER: _ClassVar[int]
    EXPORTED_AT_FIELD_NUMBER: _ClassVar[int]
    DIMENSIONS_FIELD_NUMBER: _ClassVar[int]
    PADDING_FIELD_NUMBER: _ClassVar[int]
    MESH_FIELD_NUMBER: _ClassVar[int]
    DROPPED_STATE_FIELD_NUMBER: _ClassVar[int]
    schema_version: int
    name: str
    source_function: str
    versions: Versions
    platforms: _containers.RepeatedScalarFieldContainer[str]
    nr_devices: int
    programs: _containers.RepeatedCompositeFieldContainer[Program]
    dropped_leaves: _containers.RepeatedCompositeFieldContainer[DroppedLeaf]
    inputs: _containers.RepeatedCompositeFieldContainer[TensorSpec]
    outputs: _containers.RepeatedCompositeFieldContainer[TensorSpec]
    files: _containers.RepeatedCompositeFieldContainer[FileEntry]
    goldens: _containers.RepeatedCompositeFieldContainer[GoldenCase]
    checks: Checks
    batching: Batching
    vjp_order: int
    allowed_custom_calls: _containers.RepeatedScalarFieldContainer[str]
    exported_at: str
    dimensions: _containers.RepeatedCompositeFieldContainer[Dimension]
    padding: _containers.RepeatedCompositeFieldContainer[Padding]
    mesh: Mesh
    dropped_state: _containers.RepeatedCompositeFieldContainer[DroppedState]
    def __init__(self, schema_version: _Optional[int] = ..., name: _Optional[str] = ..., source_function: _Optional[str] = ..., versions: _Optional[_Union[Versions, _Mapping]] = ..., platforms: _Optional[_Iterable[str]] = ..., nr_devices: _Optional[int] = ..., programs: _Optional[_Iterable[_Union[Program, _Mapping]]] = ..., dropped_leaves: _Optional[_Iterable[_Union[DroppedLeaf, _Mapping]]] = ..., inputs: _Optional[_Iterable[_Union[TensorSpec, _Mapping]]] = ..., outputs: _Optional[_Iterable[_Union[TensorSpec, _Mapping]]] = ..., files: _Optional[_Iterable[_Union[FileEntry, _Mapping]]] = ..., goldens: _Optional[_Iterable[_Union[GoldenCase, _Mapping]]] = ..., checks: _Optional[_Union[Checks, _Mapping]] = ..., batching: _Optional[_Union[Batching, _Mapping]] = ..., vjp_order: _Optional[int] = ..., allowed_custom_calls: _Optional[_Iterable[str]] = ..., exported_at: _Optional[str] = ..., dimensions: _Optional[_Iterable[_Union[Dimension, _Mapping]]] = ..., padding: _Optional[_Iterable[_Union[Padding, _Mapping]]] = ..., mesh: _Optional[_Union[Mesh, _Mapping]] = ..., dropped_state: _Optional[_Iterable[_Union[DroppedState, _Mapping]]] = ...) -> None: ...

class Dimension(_message.Message):
    __slots__ = ("name", "min", "max", "multiple_of", "expression")
    NAME_FIELD_NUMBER: _ClassVar[int]
    MIN_FIELD_NUMBER: _ClassVar[int]
    MAX_FIELD_NUMBER: _ClassVar[int]
    MULTIPLE_OF_FIELD_NUMBER: _ClassVar[int]
    EXPRESSION_FIELD_NUMBER: _ClassVar[int]
    name: str
    min: int
    max: int
    multiple_of: int
    expression: str
    def __init__(self, name: _Optional[str] = ..., min: _Optional[int] = ..., max: _Optional[int] = ..., multiple_of: _Optional[int] = ..., expression: _Optional[str] = ...) -> None: ...

class Padding(_message.Message):
    __slots__ = ("dim", "mask_input")
    DIM_FIELD_NUMBER: _ClassVar[int]
    MASK_INPUT_FIELD_NUMBER: _ClassVar[int]
    dim: str
    mask_input: str
    def __init__(self, dim: _Optional[str] = ..., mask_input: _Optional[str] = ...) -> None: ...

class Mesh(_message.Message):
    __slots__ = ("axes",)
    AXES_FIELD_NUMBER: _ClassVar[int]
    axes: _containers.RepeatedCompositeFieldContainer[MeshAxis]
    def __init__(self, axes: _Optional[_Iterable[_Union[MeshAxis, _Mapping]]] = ...) -> None: ...

class MeshAxis(_message.Message):
    __slots__ = ("name", "size")
    NAME_FIELD_NUMBER: _ClassVar[int]
    SIZE_FIELD_NUMBER: _ClassVar[int]
    name: str
    size: int
    def __init__(self, name: _Optional[str] = ..., size: _Optional[int] = ...) -> None: ...

class Sharding(_message.Message):
    __slots__ = ("spec", "hlo_sharding")
    SPEC_FIELD_NUMBER: _ClassVar[int]
    HLO_SHARDING_FIELD_NUMBER: _ClassVar[int]
    spec: _containers.RepeatedScalarFieldContainer[str]
    hlo_sharding: str
    def __init__(self, spec: _Optional[_Iterable[str]] = ..., hlo_sharding: _Optional[str] = ...) -> None: ...

class Versions(_message.Message):
    __slots__ = ("jaxport", "jax", "jaxlib", "stablehlo_target", "calling_convention", "serialization")
    JAXPORT_FIELD_NUMBER: _ClassVar[int]
    JAX_FIELD_NUMBER: _ClassVar[int]
    JAXLIB_FIELD_NUMBER: _ClassVar[int]
    STABLEHLO_TARGET_FIELD_NUMBER: _ClassVar[int]
    CALLING_CONVENTION_FIELD_NUMBER: _ClassVar[int]
    SERIALIZATION_FIELD_NUMBER: _ClassVar[int]
    jaxport: str
    jax: str
    jaxlib: str
    stablehlo_target: str
    calling_convention: int
    serialization: int
    def __init__(self, jaxport: _Optional[str] = ..., jax: _Optional[str] = ..., jaxlib: _Optional[str] = ..., stablehlo_target: _Optional[str] = ..., calling_convention: _Optional[int] = ..., serialization: _Optional[int] = ...) -> None: ...

class Program(_message.Message):
    __slots__ = ("mlirbc_file", "mlir_file", "jaxexport_file", "batch_size", "arguments", "results", "custom_call_targets", "polymorphic", "dims")
    class DimsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    MLIRBC_FILE_FIELD_NUMBER: _ClassVar[int]
    MLIR_FILE_FIELD_NUMBER: _ClassVar[int]
    JAXEXPORT_FILE_FIELD_NUMBER: _ClassVar[int]
    BATCH_SIZE_FIELD_NUMBER: _ClassVar[int]
    ARGUMENTS_FIELD_NUMBER: _ClassVar[int]
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    CUSTOM_CALL_TARGETS_FIELD_NUMBER: _ClassVar[int]
    POLYMORPHIC_FIELD_NUMBER: _ClassVar[int]
    DIMS_FIELD_NUMBER: _ClassVar[int]
    mlirbc_file: str
    mlir_file: str
    jaxexport_file: str
    batch_size: int
    arguments: _containers.RepeatedCompositeFieldContainer[Argument]
    results: _containers.RepeatedCompositeFieldContainer[Result]
    custom_call_targets: _containers.RepeatedScalarFieldContainer[str]
    polymorphic: bool
    dims: _containers.ScalarMap[str, int]
    def __init__(self, mlirbc_file: _Optional[str] = ..., mlir_file: _Optional[str] = ..., jaxexport_file: _Optional[str] = ..., batch_size: _Optional[int] = ..., arguments: _Optional[_Iterable[_Union[Argument, _Mapping]]] = ..., results: _Optional[_Iterable[_Union[Result, _Mapping]]] = ..., custom_call_targets: _Optional[_Iterable[str]] = ..., polymorphic: _Optional[bool] = ..., dims: _Optional[_Mapping[str, int]] = ...) -> None: ...

class DType(_message.Message):
    __slots__ = ("numpy", "mlir", "datatype", "itemsize")
    NUMPY_FIELD_NUMBER: _ClassVar[int]
    MLIR_FIELD_NUMBER: _ClassVar[int]
    DATATYPE_FIELD_NUMBER: _ClassVar[int]
    ITEMSIZE_FIELD_NUMBER: _ClassVar[int]
    numpy: str
    mlir: str
    datatype: str
    itemsize: int
    def __init__(self, numpy: _Optional[str] = ..., mlir: _Optional[str] = ..., datatype: _Optional[str] = ..., itemsize: _Optional[int] = ...) -> None: ...

class TensorSpec(_message.Message):
    __slots__ = ("name", "shape", "dtype", "labels_file", "dim_names")
    NAME_FIELD_NUMBER: _ClassVar[int]
    SHAPE_FIELD_NUMBER: _ClassVar[int]
    DTYPE_FIELD_NUMBER: _ClassVar[int]
    LABELS_FILE_FIELD_NUMBER: _ClassVar[int]
    DIM_NAMES_FIELD_NUMBER: _ClassVar[int]
    name: str
    shape: _containers.RepeatedScalarFieldContainer[int]
    dtype: DType
    labels_file: str
    dim_names: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, name: _Optional[str] = ..., shape: _Optional[_Iterable[int]] = ..., dtype: _Optional[_Union[DType, _Mapping]] = ..., labels_file: _Optional[str] = ..., dim_names: _Optional[_Iterable[str]] = ...) -> None: ...

class Argument(_message.Message):
    __slots__ = ("index", "role", "name", "key_path", "leaf_index", "shape", "dtype", "byte_size", "tensorstore_spec_json", "sha256", "dim_names", "sharding")
    INDEX_FIELD_NUMBER: _ClassVar[int]
    ROLE_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    KEY_PATH_FIELD_NUMBER: _ClassVar[int]
    LEAF_INDEX_FIELD_NUMBER: _ClassVar[int]
    SHAPE_FIELD_NUMBER: _ClassVar[int]
    DTYPE_FIELD_NUMBER: _ClassVar[int]
    BYTE_SIZE_FIELD_NUMBER: _ClassVar[int]
    TENSORSTORE_SPEC_JSON_FIELD_NUMBER: _ClassVar[int]
    SHA256_FIELD_NUMBER: _ClassVar[int]
    DIM_NAMES_FIELD_NUMBER: _ClassVar[int]
    SHARDING_FIELD_NUMBER: _ClassVar[int]
    index: int
    role: ArgumentRole
    name: str
    key_path: str
    leaf_index: int
    shape: _containers.RepeatedScalarFieldContainer[int]
    dtype: DType
    byte_size: int
    tensorstore_spec_json: str
    sha256: str
    dim_names: _containers.RepeatedScalarFieldContainer[str]
    sharding: Sharding
    def __init__(self, index: _Optional[int] = ..., role: _Optional[_Union[ArgumentRole, str]] = ..., name: _Optional[str] = ..., key_path: _Optional[str] = ..., leaf_index: _Optional[int] = ..., shape: _Optional[_Iterable[int]] = ..., dtype: _Optional[_Union[DType, _Mapping]] = ..., byte_size: _Optional[int] = ..., tensorstore_spec_json: _Optional[str] = ..., sha256: _Optional[str] = ..., dim_names: _Optional[_Iterable[str]] = ..., sharding: _Optional[_Union[Sharding, _Mapping]] = ...) -> None: ...

class Result(_message.Message):
    __slots__ = ("index", "role", "name", "shape", "dtype", "byte_size", "check", "dim_names", "sharding")
    INDEX_FIELD_NUMBER: _ClassVar[int]
    ROLE_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    SHAPE_FIELD_NUMBER: _ClassVar[int]
    DTYPE_FIELD_NUMBER: _ClassVar[int]
    BYTE_SIZE_FIELD_NUMBER: _ClassVar[int]
    CHECK_FIELD_NUMBER: _ClassVar[int]
    DIM_NAMES_FIELD_NUMBER: _ClassVar[int]
    SHARDING_FIELD_NUMBER: _ClassVar[int]
    index: int
    role: ResultRole
    name: str
    shape: _containers.RepeatedScalarFieldContainer[int]
    dtype: DType
    byte_size: int
    check: CheckLeaf
    dim_names: _containers.RepeatedScalarFieldContainer[str]
    sharding: Sharding
    def __init__(self, index: _Optional[int] = ..., role: _Optional[_Union[ResultRole, str]] = ..., name: _Optional[str] = ..., shape: _Optional[_Iterable[int]] = ..., dtype: _Optional[_Union[DType, _Mapping]] = ..., byte_size: _Optional[int] = ..., check: _Optional[_Union[CheckLeaf, _Mapping]] = ..., dim_names: _Optional[_Iterable[str]] = ..., sharding: _Optional[_Union[Sharding, _Mapping]] = ...) -> None: ...

class DroppedLeaf(_message.Message):
    __slots__ = ("leaf_index", "key_path", "name", "kind")
    LEAF_INDEX_FIELD_NUMBER: _ClassVar[int]
    KEY_PATH_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    leaf_index: int
    key_path: str
    name: str
    kind: str
    def __init__(self, leaf_index: _Optional[int] = ..., key_path: _Optional[str] = ..., name: _Optional[str] = ..., kind: _Optional[str] = ...) -> None: ...

class DroppedState(_message.Message):
    __slots__ = ("layer", "kind", "leaves", "reason")
    LAYER_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    LEAVES_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    layer: str
    kind: str
    leaves: _containers.RepeatedScalarFieldContainer[str]
    reason: str
    def __init__(self, layer: _Optional[str] = ..., kind: _Optional[str] = ..., leaves: _Optional[_Iterable[str]] = ..., reason: _Optional[str] = ...) -> None: ...

class FileEntry(_message.Message):
    __slots__ = ("path", "size_bytes", "sha256")
    PATH_FIELD_NUMBER: _ClassVar[int]
    SIZE_BYTES_FIELD_NUMBER: _ClassVar[int]
    SHA256_FIELD_NUMBER: _ClassVar[int]
    path: str
    size_bytes: int
    sha256: str
    def __init__(self, path: _Optional[str] = ..., size_bytes: _Optional[int] = ..., sha256: _Optional[str] = ...) -> None: ...

class GoldenCase(_message.Message):
    __slots__ = ("name", "inputs", "outputs", "check_outputs", "expected_error", "expected_check", "batch_size", "output_cotangents", "gradients", "dims")
    class InputsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    class OutputsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    class CheckOutputsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    class OutputCotangentsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    class GradientsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    class DimsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    NAME_FIELD_NUMBER: _ClassVar[int]
    INPUTS_FIELD_NUMBER: _ClassVar[int]
    OUTPUTS_FIELD_NUMBER: _ClassVar[int]
    CHECK_OUTPUTS_FIELD_NUMBER: _ClassVar[int]
    EXPECTED_ERROR_FIELD_NUMBER: _ClassVar[int]
    EXPECTED_CHECK_FIELD_NUMBER: _ClassVar[int]
    BATCH_SIZE_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_COTANGENTS_FIELD_NUMBER: _ClassVar[int]
    GRADIENTS_FIELD_NUMBER: _ClassVar[int]
    DIMS_FIELD_NUMBER: _ClassVar[int]
    name: str
    inputs: _containers.ScalarMap[str, str]
    outputs: _containers.ScalarMap[str, str]
    check_outputs: _containers.ScalarMap[str, str]
    expected_error: str
    expected_check: str
    batch_size: int
    output_cotangents: _containers.ScalarMap[str, str]
    gradients: _containers.ScalarMap[str, str]
    dims: _containers.ScalarMap[str, int]
    def __init__(self, name: _Optional[str] = ..., inputs: _Optional[_Mapping[str, str]] = ..., outputs: _Optional[_Mapping[str, str]] = ..., check_outputs: _Optional[_Mapping[str, str]] = ..., expected_error: _Optional[str] = ..., expected_check: _Optional[str] = ..., batch_size: _Optional[int] = ..., output_cotangents: _Optional[_Mapping[str, str]] = ..., gradients: _Optional[_Mapping[str, str]] = ..., dims: _Optional[_Mapping[str, int]] = ...) -> None: ...

class Checks(_message.Message):
    __slots__ = ("enabled", "codes", "golden_kinds")
    ENABLED_FIELD_NUMBER: _ClassVar[int]
    CODES_FIELD_NUMBER: _ClassVar[int]
    GOLDEN_KINDS_FIELD_NUMBER: _ClassVar[int]
    enabled: _containers.RepeatedScalarFieldContainer[str]
    codes: _containers.RepeatedCompositeFieldContainer[ErrorCode]
    golden_kinds: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, enabled: _Optional[_Iterable[str]] = ..., codes: _Optional[_Iterable[_Union[ErrorCode, _Mapping]]] = ..., golden_kinds: _Optional[_Iterable[str]] = ...) -> None: ...

class CheckLeaf(_message.Message):
    __slots__ = ("part", "effect")
    PART_FIELD_NUMBER: _ClassVar[int]
    EFFECT_FIELD_NUMBER: _ClassVar[int]
    part: str
    effect: int
    def __init__(self, part: _Optional[str] = ..., effect: _Optional[int] = ...) -> None: ...

class ErrorCode(_message.Message):
    __slots__ = ("code", "kind", "effect", "message_template", "payload_size", "location")
    CODE_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    EFFECT_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_TEMPLATE_FIELD_NUMBER: _ClassVar[int]
    PAYLOAD_SIZE_FIELD_NUMBER: _ClassVar[int]
    LOCATION_FIELD_NUMBER: _ClassVar[int]
    code: int
    kind: str
    effect: int
    message_template: str
    payload_size: int
    location: str
    def __init__(self, code: _Optional[int] = ..., kind: _Optional[str] = ..., effect: _Optional[int] = ..., message_template: _Optional[str] = ..., payload_size: _Optional[int] = ..., location: _Optional[str] = ...) -> None: ...

class Batching(_message.Message):
    __slots__ = ("batch_sizes", "batched_inputs", "batched_outputs")
    BATCH_SIZES_FIELD_NUMBER: _ClassVar[int]
    BATCHED_INPUTS_FIELD_NUMBER: _ClassVar[int]
    BATCHED_OUTPUTS_FIELD_NUMBER: _ClassVar[int]
    batch_sizes: _containers.RepeatedScalarFieldContainer[int]
    batched_inputs: _containers.RepeatedScalarFieldContainer[str]
    batched_outputs: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, batch_sizes: _Optional[_Iterable[int]] = ..., batched_inputs: _Optional[_Iterable[str]] = ..., batched_outputs: _Optional[_Iterable[str]] = ...) -> None: ...
