"""`jaxport export` and `jaxport verify` command lines.

User mistakes print ONE line, `jaxport <cmd>: error: <what and how to fix>`, and exit 2 for
malformed usage or 1 otherwise; never a traceback.
"""

from __future__ import annotations

import importlib
import logging
import os
import re
import sys
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from jaxport.artifact.errors import ArtifactError
from jaxport.cli import CommandParser
from jaxport.exporter.errors import ExportError, UsageError
from jaxport.exporter.module import DEFAULT_MAX_CONSTANT_BYTES

__all__ = ["export_main", "parse_input_spec", "verify_main"]

_INPUT_RE = re.compile(r"^(?P<name>[^:\[\]\s]+):(?P<dtype>[A-Za-z0-9_]+)\[(?P<dims>[^\[\]]*)\]$")


# Width-less names numpy accepts, what they silently mean, and what a model usually wants.
_WIDTHLESS = {"float": "float64", "int": "int64", "uint": "uint64", "complex": "complex128"}
_WIDTHLESS_HINT = {"float": "float32", "int": "int32", "uint": "uint32", "complex": "complex64"}


class _Parser(CommandParser):
    """The jaxport commands' argparse (jaxport.cli.CommandParser: one-line mistakes, flags
    spelled out in full): raises UsageError."""

    usage_error = UsageError


def parse_input_spec(text: str) -> tuple[str, Any, tuple[int | str, ...]]:
    """`NAME:DTYPE[d0,d1,...]` -> (name, numpy dtype, shape). DTYPE: numpy name or OIP datatype.
    A dimension is a number or a name (a symbolic dimension, which `--dim` must declare)."""
    from jaxport.protocol import dtypes

    m = _INPUT_RE.match(text.strip())
    if not m:
        raise UsageError(
            f"--input {text!r}: expected NAME:DTYPE[d0,d1,...], e.g. x:float32[8,16] "
            "(scalar: x:int32[])"
        )
    name, dtype_name, dims_text = m.group("name"), m.group("dtype"), m.group("dims").strip()
    if dtype_name.lower() in _WIDTHLESS:
        raise UsageError(
            f"--input {name}: dtype {dtype_name!r} has no width (numpy would read it as "
            f"{_WIDTHLESS[dtype_name.lower()]}); say which, e.g. {name}:"
            f"{_WIDTHLESS_HINT[dtype_name.lower()]}[{dims_text}]"
        )
    try:
        row = dtypes.by_numpy(dtype_name)
    except dtypes.UnsupportedDtypeError:
        try:
            row = dtypes.by_datatype(dtype_name.upper())
        except dtypes.UnsupportedDtypeError:
            supported = ", ".join(d.numpy_name for d in dtypes.DTYPES)
            raise UsageError(
                f"--input {name}: unknown dtype {dtype_name!r}; supported: {supported}"
            ) from None
    shape: list[int | str] = []
    for dim in (d.strip() for d in dims_text.split(",")) if dims_text else ():
        if dim.isdigit():
            shape.append(int(dim))
        elif re.fullmatch(r"[A-Za-z_]\w*", dim):
            shape.append(dim)
        elif re.search(r"[A-Za-z_]", dim):
            raise UsageError(
                f"--input {name}: dimension {dim!r} in {text!r} is a form, not a name: a "
                "symbolic dimension is one name (T) that an input has alone (jax cannot solve "
                "a+b or 2*T from a request's shape); for multiples use --dim T=MIN..MAX:2")
        else:
            raise UsageError(f"--input {name}: bad dimension {dim!r} in {text!r}")
    return name, row.numpy, tuple(shape)


def _undeclared(specs: Sequence[tuple[str, Any, tuple[int | str, ...]]], texts: Sequence[str]
                ) -> None:
    """Without --dim, a named dimension is refused naming it and both ways out."""
    for (name, _, shape), text in zip(specs, texts, strict=True):
        for dim in shape:
            if isinstance(dim, str):
                raise ExportError(
                    f"--input {name}: symbolic dimension {dim!r} in {text!r} has no --dim: "
                    f"declare its sizes (--dim {dim}=MIN..MAX[:MULTIPLE], one shape-polymorphic "
                    "program), or give a number (fixed shapes; for a batch dimension write it B "
                    "in dimension 0 and pass --batch-sizes 1,8,32, one program per size)")


def _parse_dims(values: Sequence[str]) -> dict[str, tuple[int, int, int]]:
    """`--dim NAME=MIN..MAX[:MULTIPLE]`, repeated -> {name: (min, max, multiple)}."""
    from jaxport.exporter.symbolic import DIM_SYNTAX, parse_dim_range

    out: dict[str, tuple[int, int, int]] = {}
    for v in values:
        name, _, rng = v.partition("=")
        name = name.strip()
        try:
            if not re.fullmatch(r"[A-Za-z_]\w*", name):
                raise ValueError(name)
            parsed = parse_dim_range(rng)
        except ValueError:
            raise UsageError(f"--dim {v!r}: expected {DIM_SYNTAX}") from None
        if name in out:
            raise UsageError(f"--dim {name}: given twice")
        out[name] = parsed
    return out


def _parse_padding(values: Sequence[str]) -> dict[str, str]:
    """`--pad DIM=MASK`, repeated -> {dim: mask input}."""
    out: dict[str, str] = {}
    for v in values:
        name, _, mask = (t.strip() for t in v.partition("="))
        if not re.fullmatch(r"[A-Za-z_]\w*", name) or not mask:
            raise UsageError(f"--pad {v!r}: expected DIM=MASK_INPUT, e.g. --pad T=mask")
        if name in out:
            raise UsageError(f"--pad {name}: given twice")
        out[name] = mask
    return out


def _parse_buckets(values: Sequence[str]) -> dict[str, list[int]]:
    """`--buckets DIM=N1,N2,...`, repeated -> {dim: [sizes]}."""
    out: dict[str, list[int]] = {}
    for v in values:
        name, _, sizes = v.partition("=")
        name = name.strip()
        parts = [t.strip() for t in sizes.split(",")]
        if not re.fullmatch(r"[A-Za-z_]\w*", name) or not all(t.isdigit() for t in parts):
            raise UsageError(f"--buckets {v!r}: expected DIM=N1,N2,..., e.g. --buckets "
                             "T=128,512 (repeat per dimension)")
        if name in out:
            raise UsageError(f"--buckets {name}: given twice")
        out[name] = [int(t) for t in parts]
    return out


def _import_attr(spec: str, flag: str) -> Callable[..., Any]:
    """Resolve `MODULE:ATTR`, importable from the current directory or PYTHONPATH."""
    if spec.count(":") != 1 or not all(spec.split(":")):
        raise UsageError(f"{flag} {spec!r}: expected MODULE:FUNCTION, e.g. mymodel:predict "
                         "or mymodel:model.apply")
    module_name, attr = spec.split(":")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name and module_name.startswith(exc.name):
            raise ExportError(
                f"{flag}: cannot import module {module_name!r} (run from the directory that "
                "contains it or add that directory to PYTHONPATH)"
            ) from None
        raise ExportError(f"{flag}: importing {module_name!r} failed: {exc}"
                          f"{_import_location(exc)}") from None
    except Exception as exc:
        first = (str(exc).strip().splitlines() or [""])[0]
        raise ExportError(
            f"{flag}: importing {module_name!r} failed: {type(exc).__name__}: {first}"
            f"{_import_location(exc)}"
        ) from None
    value: Any = module
    done = module_name
    for part in attr.split("."):  # MODULE:model.apply
        try:
            value = getattr(value, part)
        except AttributeError:
            what = f"module {module_name!r}" if value is module else \
                f"{done} (a {type(value).__name__})"
            raise ExportError(f"{flag}: {what} has no attribute {part!r}") from None
        done = f"{done}.{part}" if done != module_name else f"{module_name}:{part}"
    if not callable(value):
        raise ExportError(f"{flag}: {spec} is a {type(value).__name__}, not a function")
    return value


def _import_location(exc: BaseException) -> str:
    """` (raised at FILE:LINE)`: where in the user's code an import failed (a SyntaxError's
    own position), as a failed trace says; empty when no user frame is known."""
    from jaxport.exporter.trace import user_location

    where = None
    if isinstance(exc, SyntaxError) and exc.filename and exc.lineno:
        where = f"{os.path.relpath(exc.filename)}:{exc.lineno}"
    where = where or user_location(exc)
    return f" (raised at {where})" if where else ""


def _quiet_libraries() -> None:
    """Keep stderr for our own messages: Orbax/absl log INFO and WARNING lines by default."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    try:
        import absl.logging

        absl.logging.set_verbosity(absl.logging.ERROR)
    except ImportError:
        pass
    logging.getLogger("absl").setLevel(logging.ERROR)
    warnings.filterwarnings("ignore", module="orbax")


def _load_params(value: str, step: str | None,
                 params_path: str | None) -> tuple[Any, str | None]:
    """`--params`: an Orbax checkpoint (item, step or CheckpointManager directory), a Hugging
    Face `save_pretrained` directory (its flax_model.msgpack), a flax `.msgpack` file, or
    MODULE:INIT called with key(0). Returns the tree and what is left of
    `--params-path` (its first part may name a checkpoint item)."""
    path = Path(value)
    if path.is_dir():
        from jaxport.exporter import checkpoint
        from jaxport.exporter import params as params_mod

        hf = checkpoint.hf_weights(value)
        if hf is not None:
            if step is not None:
                raise UsageError(f"--step {step}: only for an Orbax CheckpointManager directory")
            return params_mod.load_msgpack(hf), params_path
        restored = checkpoint.restore(value, step=step, params_path=params_path)
        return restored.tree, restored.params_path
    if step is not None:
        raise UsageError(f"--step {step}: only for an Orbax CheckpointManager directory")
    if path.is_file():
        if path.suffix == ".msgpack":
            from jaxport.exporter import params as params_mod

            return params_mod.load_msgpack(path), params_path
        raise ExportError(
            f"--params {value}: a file, but not a .msgpack checkpoint; pass an Orbax "
            "checkpoint directory, a flax .msgpack file or MODULE:INIT_FUNCTION"
        )
    if ":" in value and not path.exists():
        import jax

        init = _import_attr(value, "--params")
        try:
            return init(jax.random.key(0)), params_path
        except Exception as exc:
            first = (str(exc).strip().splitlines() or [""])[0]
            raise ExportError(f"--params {value}(jax.random.key(0)) failed: "
                              f"{type(exc).__name__}: {first}") from None
    raise ExportError(
        f"--params {value!r}: no such checkpoint directory or .msgpack file "
        "(and not MODULE:INIT_FUNCTION)"
    )


def _note_replaced_batch_dims(texts: Sequence[str], batch_sizes: Sequence[int]) -> None:
    """Warn about `--input x:float32[8,16]` with `--batch-sizes`: its 8 is replaced by each
    batch size (the documented spelling is `B`), which a user may not expect."""
    from jaxport.exporter.progress import Progress

    sizes = ",".join(map(str, sorted(batch_sizes)))
    for text in texts:
        m = re.match(r"\s*([^:]+):([^\[]+)\[\s*(\d+)\s*(,[^\]]*)?\]", text)
        if m:
            rest = m.group(4) or ""
            Progress().warn(
                f"--input {text}: with --batch-sizes dimension 0 is the batch dimension, so its "
                f"{m.group(3)} is replaced by each batch size ({sizes}); write it B "
                f"({m.group(1)}:{m.group(2)}[B{rest}]) to say so")


def _export_parser() -> _Parser:
    p = _Parser(
        prog="jaxport export",
        description="Export FUNCTION(params, *inputs) as a StableHLO artifact (fixed shapes, "
                    "or symbolic dimensions declared with --dim).",
    )
    p.add_argument("function", metavar="MODULE:FUNCTION",
                   help="the function to export, called as FUNCTION(params, *inputs)")
    p.add_argument("--params", required=True, metavar="PATH|MODULE:INIT",
                   help="Orbax checkpoint (CheckpointManager, step or item directory), Hugging "
                        "Face save_pretrained directory, flax .msgpack file (e.g. "
                        "flax_model.msgpack), or "
                        "MODULE:INIT_FUNCTION(jax.random.key(0)); "
                        "FrozenDict, NNX modules/State and any pytree are accepted")
    p.add_argument("--params-path", metavar="A.B[,C.D]",
                   help="use this subtree of the checkpoint, e.g. params (of a TrainState); "
                        "several, comma-separated, give a dict keyed by their last parts "
                        "(params,batch_stats: Linen's variables); for a checkpoint step with "
                        "several items, first the item name")
    p.add_argument("--step", metavar="N|latest",
                   help="step of an Orbax CheckpointManager directory (default: latest)")
    p.add_argument("--input", action="append", required=True, metavar="NAME:DTYPE[d0,...]",
                   help="one per positional input, in order, e.g. x:float32[8,16]")
    p.add_argument("--output", action="append", metavar="KEY=NAME|NAME",
                   help="rename an output: KEY=NAME, repeated (outputs are named by their dict "
                        "keys / fields by default); or one NAME per output in flatten order")
    p.add_argument("--labels", action="append", metavar="OUTPUT=FILE",
                   help="class labels of an output: a UTF-8 text file, line i naming class i "
                        "of its last dimension; copied into the artifact (repeat per output)")
    p.add_argument("--out", required=True, metavar="DIR", help="artifact directory to create")
    p.add_argument("--goldens", type=int, default=2, metavar="N",
                   help="golden cases (default 2; verify needs >= 1)")
    p.add_argument("--platforms", default="cpu", metavar="P1,P2",
                   help="lowering platforms: cpu,cuda,rocm,tpu (default cpu)")
    p.add_argument("--name", help="model name recorded in the manifest")
    p.add_argument("--force", action="store_true", help="replace an existing --out directory")
    p.add_argument("--quiet", action="store_true", help="no progress output")
    p.add_argument("--verbose", action="store_true",
                   help="on an error, print its full traceback before the one-line message")
    p.add_argument("--checks", default="", metavar="KINDS",
                   help="export checkify checks: comma-separated user,index,nan,div")
    p.add_argument("--batch-sizes", metavar="N1,N2,...",
                   help="one fixed-shape program per batch size (e.g. 1,8,32): dimension 0 of "
                        "every input is the batch dimension; write it B, e.g. x:float32[B,16]")
    p.add_argument("--dim", action="append", default=[], metavar="NAME=MIN..MAX[:M]",
                   help="declare a symbolic dimension named in --input shapes (e.g. "
                        "tokens:int32[B,T]) with its sizes: --dim B=1..64 --dim T=8..2048:8 "
                        "(:8 = multiples of 8); exports ONE shape-polymorphic program")
    p.add_argument("--buckets", action="append", default=[], metavar="DIM=N1,N2",
                   help="with --dim: also one fixed-shape program per combination of these "
                        "sizes (e.g. T=128,512; repeat per dimension; --batch-sizes gives B's), "
                        "for consumers without jax (PJRT, IREE)")
    p.add_argument("--pad", action="append", default=[], metavar="DIM=MASK",
                   help="with --buckets: the bool or integer input MASK marks valid positions "
                        "along DIM (False / 0 = padding, e.g. an int32 attention_mask), so a "
                        "request may be padded along DIM up to a bucket; checked at export on a "
                        "sample (e.g. --pad T=mask)")
    p.add_argument("--max-constant-bytes", type=int, metavar="N",
                   help="largest dense constant the program may embed (default "
                        f"{DEFAULT_MAX_CONSTANT_BYTES}); larger ones are refused as baked-in "
                        "weights. Raising it copies those bytes into every program file")
    p.add_argument("--golden-inputs", metavar="MODULE:FUNCTION",
                   help="FUNCTION() returns {case name: inputs in --input order (or by name)}: "
                        "golden cases with your own inputs, besides the --goldens samples")
    p.add_argument("--check-goldens", metavar="MODULE:FUNCTION",
                   help="FUNCTION() returns {case name: inputs in --input order}: extra goldens, "
                        "one passing and one tripping each check kind")
    p.add_argument("--allow-custom-call", action="append", default=[], metavar="TARGET",
                   help="export a custom-call target outside jax's compatibility guarantee "
                        "(an FFI kernel); repeat per target. Consumers must register the same "
                        "kernel; recorded in the manifest and warned about")
    p.add_argument("--allow-train-mode", action="store_true",
                   help="export a model in training mode anyway (dropout with a key fixed at "
                        "export, BatchNorm with batch statistics; refused by default, naming "
                        "the layer); warned about and recorded in the manifest's droppedState")
    p.add_argument("--calling-convention", type=int, metavar="N",
                   help="lower @main with jax calling convention version N, for a consumer "
                        "with an older jax (default: this jax's; range: jax's supported one)")
    p.add_argument("--vjp-order", type=int, default=0, metavar="N",
                   help="serialize N levels of reverse-mode derivatives with the program, so "
                        "jax.grad works on the loaded artifact (default 0: forward only)")
    p.add_argument("--mesh", metavar="NAME=SIZE[,NAME=SIZE]",
                   help="export a sharded program over a device mesh, e.g. data=2,model=2 "
                        "(devices = product of sizes; on CPU this command provides them)")
    p.add_argument("--shard", action="append", metavar="KEY=SPEC",
                   help="with --mesh: PartitionSpec of an input, output or parameters (name or "
                        "glob on manifest names), one entry per axis: a mesh axis, None, or "
                        "a+b; e.g. x=data,None or 'params.w1=None,model' (repeat; default: "
                        "replicated)")
    p.add_argument("--require-check-goldens", action="store_true",
                   help="with --checks: fail when no golden case trips an enabled kind (after "
                        "the exporter's bounded search for tripping inputs); default: a warning")
    return p


def _parse_outputs(values: list[str] | None) -> list[str] | dict[str, str] | None:
    """`--output`: all `KEY=NAME` (a rename mapping) or all plain names (flatten order)."""
    if not values:
        return None
    pairs = [v for v in values if "=" in v]
    if not pairs:
        return list(values)
    if len(pairs) != len(values):
        raise UsageError(f"--output: mix of KEY=NAME and plain names ({', '.join(values)}); "
                         "use KEY=NAME for every renamed output")
    mapping: dict[str, str] = {}
    for v in values:
        key, _, new = v.partition("=")
        if not key or not new:
            raise UsageError(f"--output {v!r}: expected KEY=NAME, e.g. --output logits=scores")
        if key in mapping:
            raise UsageError(f"--output: {key!r} renamed twice")
        mapping[key] = new
    return mapping


def _key_values(values: list[str] | None, flag: str, expected: str, *, what: str = "",
                empty_value: bool = False) -> dict[str, str]:
    """A repeated `--flag KEY=VALUE` -> {key: value}, in order; each key once."""
    out: dict[str, str] = {}
    for v in values or ():
        key, sep, value = v.partition("=")
        if not key or not sep or not (value or empty_value):
            raise UsageError(f"{flag} {v!r}: expected {expected}")
        if key in out:
            raise UsageError(f"{flag}: {what}{key!r} given twice ({out[key]}, {value})")
        out[key] = value
    return out


def _parse_labels(values: list[str] | None) -> dict[str, str] | None:
    """`--labels OUTPUT=FILE`, repeated -> {output: file}."""
    if not values:
        return None
    return _key_values(values, "--labels", "OUTPUT=FILE, e.g. --labels probs=labels.txt",
                       what="output ")


def _parse_batch_sizes(text: str) -> list[int]:
    """`1,8,32` -> [1, 8, 32]; anything else is a usage error naming the flag."""
    parts = [t.strip() for t in text.split(",")]
    if not all(t.isdigit() and int(t) > 0 for t in parts):
        raise UsageError(
            f"--batch-sizes {text!r}: expected comma-separated positive integers, e.g. 1,8,32")
    return [int(t) for t in parts]


def _run(cmd: str, body: Callable[[], int], verbose: bool = False) -> int:
    try:
        return body()
    except ExportError as exc:
        if verbose:  # the traceback of what went wrong (our one-line error hides it)
            import traceback

            cause = exc.__cause__ or exc.__context__ or exc
            traceback.print_exception(cause, file=sys.stderr)
        print(f"jaxport {cmd}: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except ArtifactError as exc:  # an artifact that is missing or malformed (verify)
        print(f"jaxport {cmd}: error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"jaxport {cmd}: error: interrupted", file=sys.stderr)
        return 130


def export_main(argv: Sequence[str]) -> int:
    """`jaxport export MODULE:FUNCTION --params ... --input ... --out DIR`."""

    def body() -> int:
        ns = _export_parser().parse_args(list(argv))
        batch_sizes = _parse_batch_sizes(ns.batch_sizes) if ns.batch_sizes is not None else None
        dims = _parse_dims(ns.dim)
        buckets = _parse_buckets(ns.buckets)
        texts = ns.input if batch_sizes is None or dims else [
            re.sub(r"\[\s*B\s*(?=[,\]])", "[1", s, count=1) for s in ns.input]
        specs = [parse_input_spec(s) for s in texts]
        if batch_sizes is not None and not dims:
            _note_replaced_batch_dims(ns.input, batch_sizes)
        if not dims:
            _undeclared(specs, texts)
        names = [n for n, _, _ in specs]
        if len(set(names)) != len(names):
            raise UsageError(f"--input names must be unique, got {names}")
        out = Path(ns.out)
        if out.exists() and not ns.force:
            raise ExportError(f"output directory {out} already exists; pass --force to replace it")
        if ns.goldens < 0:
            raise UsageError(f"--goldens must be >= 0, got {ns.goldens}")
        if ns.vjp_order < 0:
            raise UsageError(f"--vjp-order must be >= 0, got {ns.vjp_order}")
        labels = _parse_labels(ns.labels)
        if ns.max_constant_bytes is not None and ns.max_constant_bytes < 0:
            raise UsageError(f"--max-constant-bytes must be >= 0, got {ns.max_constant_bytes}")
        from jaxport.exporter import checks as checks_mod

        check_kinds = checks_mod.parse_checks(ns.checks)
        _quiet_libraries()
        import jax
        from jaxport.exporter import api
        from jaxport.exporter import sharding as sharding_mod

        mesh = sharding_mod.parse_mesh(ns.mesh) if ns.mesh is not None else None
        shards = _key_values(ns.shard, "--shard", "KEY=SPEC, e.g. --shard x=data,None or "
                             "--shard 'params.w1=None,model'", empty_value=True)
        if mesh is not None:  # before anything starts jax's backend (params, an init function)
            sharding_mod.provide_devices(mesh)

        fn = _import_attr(ns.function, "MODULE:FUNCTION")
        params, params_path = _load_params(ns.params, ns.step, ns.params_path)
        if params_path:
            from jaxport.exporter import params as params_mod

            params = params_mod.select(params, params_path)
        inputs: dict[str, Any] = {n: (shape, dt) if dims else jax.ShapeDtypeStruct(shape, dt)
                                  for n, dt, shape in specs}
        check_goldens = None
        if ns.check_goldens:
            check_goldens = _import_attr(ns.check_goldens, "--check-goldens")()
            if not isinstance(check_goldens, dict):
                raise ExportError(f"--check-goldens {ns.check_goldens} returned a "
                                  f"{type(check_goldens).__name__}, not a dict of case -> inputs")
        golden_inputs = None
        if ns.golden_inputs:
            golden_inputs = _import_attr(ns.golden_inputs, "--golden-inputs")()
            if not isinstance(golden_inputs, dict):
                raise ExportError(
                    f"--golden-inputs {ns.golden_inputs} returned a "
                    f"{type(golden_inputs).__name__}, not a dict of case -> inputs")
        manifest = api.export(
            fn, params, inputs, out, golden_inputs=golden_inputs,
            output_names=_parse_outputs(ns.output), goldens=ns.goldens,
            platforms=ns.platforms.split(","), force=ns.force, name=ns.name, quiet=ns.quiet,
            source_function=ns.function, checks=check_kinds, check_goldens=check_goldens,
            require_check_goldens=ns.require_check_goldens,
            labels=labels, vjp_order=ns.vjp_order, allow_custom_calls=ns.allow_custom_call,
            calling_convention=ns.calling_convention, dims=dims or None,
            buckets=buckets or None, padding=_parse_padding(ns.pad) or None,
            mesh=mesh, shardings=shards or None, allow_train_mode=ns.allow_train_mode,
            **({"batch_sizes": batch_sizes} if batch_sizes is not None else {}),
            **({"max_constant_bytes": ns.max_constant_bytes}
               if ns.max_constant_bytes is not None else {}),
        )
        if not ns.quiet:
            program = manifest.programs[0]
            n_params = sum(a.role == 1 for a in program.arguments)
            print(f"exported {ns.function} to {out}: {len(program.arguments)} @main arguments "
                  f"({n_params} parameters), {len(manifest.outputs)} outputs, "
                  f"{len(manifest.dropped_leaves)} dropped leaves, {len(manifest.goldens)} goldens")
        return 0

    return _run("export", body, verbose="--verbose" in argv)


def _verify_progress(quiet: bool) -> Callable[[str], None] | None:
    """Progress lines for `jaxport verify` on a terminal (stderr), None when quiet or when
    stderr is a file or pipe (logs and scripts get the table alone)."""
    if quiet or not sys.stderr.isatty():
        return None
    return lambda line: print(f"jaxport verify: {line}", file=sys.stderr, flush=True)


def verify_main(argv: Sequence[str]) -> int:
    """`jaxport verify DIR`: each consumer check in a fresh process; a table; 1 on failure."""

    def body() -> int:
        from jaxport.exporter import verify

        p = _Parser(prog="jaxport verify",
                    description="Prove an artifact works for consumers (PJRT, IREE, jax.export).")
        p.add_argument("artifact_dir", metavar="DIR")
        p.add_argument("--checks", default=",".join(verify.CHECKS),
                       help=f"comma-separated subset of {','.join(verify.CHECKS)}")
        p.add_argument("--require-iree", action="store_true",
                       help="fail (instead of skip) when IREE is not installed")
        p.add_argument("--atol", type=float, metavar="A",
                       help="this run: |actual - expected| <= A + R*|expected| for every float "
                            "output, replacing the per-dtype rules (docs: Tolerances)")
        p.add_argument("--rtol", type=float, metavar="R", help="see --atol")
        p.add_argument("--allow-unexecuted", action="store_true",
                       help="when none of the artifact's platforms is present here, check the "
                            "checksums only and pass (default: an error)")
        p.add_argument("--quiet", action="store_true",
                       help="no progress lines (printed on stderr as each check finishes, "
                            "only when stderr is a terminal)")
        ns = p.parse_args(list(argv))
        checks = [c.strip() for c in ns.checks.split(",") if c.strip()]
        unknown = [c for c in checks if c not in verify.CHECKS]
        if unknown:
            raise UsageError(f"--checks: unknown check {unknown[0]!r}; "
                             f"choose from {', '.join(verify.CHECKS)}")
        from jaxport.artifact import manifest as manifest_mod

        loaded = manifest_mod.load(Path(ns.artifact_dir).resolve())
        for line in verify.manifest_warnings(loaded):
            print(f"jaxport verify: warning: {line}", file=sys.stderr)
        results = verify.run_checks(ns.artifact_dir, checks=checks, atol=ns.atol, rtol=ns.rtol,
                                    allow_unexecuted=ns.allow_unexecuted,
                                    progress=_verify_progress(ns.quiet))
        print(verify.format_table(results))
        failed = [r.check for r in results if r.status == "fail" or (
            ns.require_iree and r.check == "iree" and r.status == "skip")]
        if failed:
            print(f"jaxport verify: FAILED: {', '.join(failed)}")
            return 1
        print(f"jaxport verify: OK ({ns.artifact_dir})")
        return 0

    return _run("verify", body)
