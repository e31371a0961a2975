"""`--params DIR`: the three shapes of an Orbax checkpoint on disk.

- an item directory (what `StandardCheckpointer.save(path, tree)` writes; `_METADATA` in it);
- a step directory of a `CheckpointManager` (`<root>/<step>/`, `_CHECKPOINT_METADATA` in it)
  holding one directory per item (`default` for a single-item manager; e.g. `state` and
  `meta` for a composite one);
- a `CheckpointManager` root, whose numeric sub-directories are the steps (the latest is used
  unless `--step N`).

A Hugging Face `save_pretrained` directory (`config.json` and `flax_model.msgpack`) is not an
Orbax checkpoint: `hf_weights` finds the msgpack inside (read by `params.load_msgpack`), and
says what to do with a directory holding only PyTorch/safetensors weights or sharded ones.

A step with several items needs the item named as the first part of `--params-path`
(`--params-path state.params`, or every path of a list: `state.params,state.batch_stats`);
every error lists the steps or items found.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from jaxport.exporter.errors import ExportError

__all__ = ["Restored", "hf_weights", "restore"]

_ITEM_MARKER = "_METADATA"
_STEP_MARKER = "_CHECKPOINT_METADATA"
_HF_FLAX = "flax_model.msgpack"
_HF_OTHER = ("model.safetensors", "pytorch_model.bin", "tf_model.h5",
             "model.safetensors.index.json", "pytorch_model.bin.index.json")


@dataclass
class Restored:
    """The restored tree, where it came from, and what is left of `--params-path`."""

    tree: Any
    item_dir: Path
    params_path: str | None


def _is_item(path: Path) -> bool:
    return (path / _ITEM_MARKER).is_file()


def _items(step_dir: Path) -> list[str]:
    return sorted(p.name for p in step_dir.iterdir() if p.is_dir() and _is_item(p))


def _steps(root: Path) -> list[int]:
    return sorted(int(p.name) for p in root.iterdir() if p.is_dir() and p.name.isdigit()
                  and any(c.is_dir() for c in p.iterdir()))


def _listing(values: list[Any], noun: str) -> str:
    if not values:
        return f"no {noun} found"
    shown = ", ".join(map(str, values[:20])) + (" ..." if len(values) > 20 else "")
    return f"{noun} found: {shown}"


def _item_dir(value: str, path: Path, step: str | None,
              params_path: str | None) -> tuple[Path, str | None]:
    if _is_item(path):
        if step is not None:
            raise ExportError(f"--step {step}: --params {value} is one checkpoint item, not a "
                              "CheckpointManager directory")
        return path, params_path
    step_dir = path
    if not (path / _STEP_MARKER).is_file():
        steps = _steps(path)
        if not steps:
            subdirs = sorted(p.name for p in path.iterdir() if p.is_dir())
            raise ExportError(
                f"--params {value}: not an Orbax checkpoint (no {_ITEM_MARKER}, no "
                f"{_STEP_MARKER}, no numeric step directories; {_listing(subdirs, 'directories')})"
                f" nor a Hugging Face save_pretrained directory (no {_HF_FLAX})"
            )
        if step in (None, "latest"):
            chosen = steps[-1]
        elif step.isdigit() and int(step) in steps:
            chosen = int(step)
        else:
            raise ExportError(
                f"--step {step}: no such step in {value} ({_listing(steps, 'steps')})")
        step_dir = path / str(chosen)
    elif step is not None:
        raise ExportError(f"--step {step}: --params {value} is already one step's directory")
    items = _items(step_dir)
    if not items:
        entries = sorted(p.name for p in step_dir.iterdir())
        raise ExportError(f"--params {value}: step directory {step_dir} holds no restorable "
                          f"item ({_listing(entries, 'entries')})")
    paths = (params_path or "").split(",")
    heads = {p.partition(".")[0] for p in paths}
    if len(items) == 1:
        # A single item is the checkpoint; `--params-path ITEM...` may still name it.
        if heads == {items[0]}:
            return step_dir / items[0], _strip(paths)
        return step_dir / items[0], params_path
    if len(heads) != 1 or next(iter(heads)) not in items:
        raise ExportError(
            f"--params {value}: step {step_dir.name} has several items ({', '.join(items)}); "
            f"name one as the first part of --params-path, e.g. --params-path {items[0]}"
            + (" (every path of a comma-separated list in the same item)"
               if len(paths) > 1 else "")
        )
    return step_dir / heads.pop(), _strip(paths)


def _strip(paths: list[str]) -> str | None:
    """The `--params-path` paths without their first part (the item's name)."""
    rests = [p.partition(".")[2] for p in paths]
    if len(rests) > 1 and not all(rests):
        raise ExportError(f"--params-path {','.join(paths)}: each path of a list must name a "
                          "subtree inside the item, e.g. state.params,state.batch_stats")
    return ",".join(rests) or None


def hf_weights(value: str) -> Path | None:
    """The `flax_model.msgpack` of a Hugging Face `save_pretrained` directory; None for any
    other directory (an Orbax checkpoint). Raises for a Hugging Face directory whose weights
    jaxport cannot read, saying how to get a Flax one."""
    path = Path(value)
    if _is_item(path) or (path / _STEP_MARKER).is_file():
        return None
    if (path / _HF_FLAX).is_file():
        return path / _HF_FLAX
    if (path / (_HF_FLAX + ".index.json")).is_file():
        raise ExportError(
            f"--params {value}: a sharded Hugging Face Flax checkpoint "
            f"({_HF_FLAX}.index.json); jaxport reads one {_HF_FLAX}: re-save it unsharded "
            "(model.save_pretrained(dir, max_shard_size='1000GB')) and pass that directory")
    other = [f for f in _HF_OTHER if (path / f).is_file()]
    if other and (path / "config.json").is_file():
        raise ExportError(
            f"--params {value}: a Hugging Face directory without Flax weights ({other[0]}, no "
            f"{_HF_FLAX}); convert it once with the Flax class: "
            f"FlaxAutoModel.from_pretrained({value!r}, from_pt=True).save_pretrained(DIR), "
            "then pass DIR")
    return None


def restore(value: str, *, step: str | None = None,
            params_path: str | None = None) -> Restored:
    """Restore the params pytree from an Orbax item, step or CheckpointManager directory."""
    path = Path(value)
    if step is not None and step != "latest" and not step.isdigit():
        raise ExportError(f"--step {step!r}: expected a step number or latest")
    item, rest = _item_dir(value, path, step, params_path)
    import orbax.checkpoint as ocp

    try:
        with ocp.StandardCheckpointer() as ckptr:
            tree = ckptr.restore(item.resolve())
    except Exception as exc:
        first = (str(exc).strip().splitlines() or [""])[0][:300]
        raise ExportError(
            f"--params {value}: cannot restore the Orbax checkpoint item {item} "
            f"({type(exc).__name__}: {first})"
        ) from None
    return Restored(tree, item, rest)
