"""Atomic writes and checked reads for every artifact the pipeline produces.

Every output goes through :func:`atomic_path`: written beside the target under a
temporary name, then renamed, so a stage killed midway leaves the old output or none,
never a torn one. Readers check what they load (schema, tensor shapes) and raise
:class:`ArtifactError` naming the file and the problem.
"""
from __future__ import annotations

import json
import math
import os
import shutil
import uuid
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator, Mapping

import numpy as np


class ArtifactError(RuntimeError):
    """An input artifact is missing, corrupt or of the wrong shape/schema."""


@contextmanager
def atomic_path(target: Path | str) -> Iterator[Path]:
    """Yield a temporary sibling path; on success rename it onto ``target``.

    Works for files and directories. On an exception the temporary is removed and
    ``target`` is left as it was.
    """
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    # Left by a killed earlier run: a half-written temporary, or (killed between the two
    # renames of a directory swap) the previous output moved aside. Either way the target
    # itself is whole or absent, so the leftovers are garbage.
    for pattern in (f".{target.name}.tmp-*", f".{target.name}.old-*"):
        for stale in target.parent.glob(pattern):
            shutil.rmtree(stale, ignore_errors=True) if stale.is_dir() else stale.unlink(missing_ok=True)
    tmp = target.with_name(f".{target.name}.tmp-{uuid.uuid4().hex[:8]}")
    try:
        yield tmp
        if not tmp.exists():
            raise ArtifactError(f"atomic write of {target}: nothing was written")
        if tmp.is_dir() and target.exists():
            old = target.with_name(f".{target.name}.old-{uuid.uuid4().hex[:8]}")
            os.replace(target, old)
            os.replace(tmp, target)
            shutil.rmtree(old, ignore_errors=True) if old.is_dir() else old.unlink()
        else:
            os.replace(tmp, target)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True) if tmp.is_dir() else tmp.unlink()


LOGS = Path("logs")


def write_run_log(name: str, record: Mapping[str, Any]) -> Path:
    """Write what a run measured about the machine (wall times) to ``logs/<name>.json``.

    Tracked outputs must be the same bytes for the same params and seed, or every rerun
    changes their hash and reruns everything downstream; timings go here instead. ``logs/``
    is ignored by git and DVC.
    """
    path = LOGS / f"{name}.json"
    write_json(path, record)
    return path


def _json_default(obj: Any) -> Any:
    if isinstance(obj, np.integer):
        return int(obj)
    if isinstance(obj, np.floating):
        return float(obj)
    if isinstance(obj, np.ndarray):
        return obj.tolist()
    if isinstance(obj, Path):
        return str(obj)
    if type(obj).__name__ == "UndeclaredParam":  # core.params: a key the stage does not declare
        obj.fail()
    raise TypeError(f"not JSON serialisable: {type(obj).__name__}")


def _finite(obj: Any) -> Any:
    """NaN/inf are not JSON; write them as null so DVC and other tools can read the file."""
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, dict):
        return {k: _finite(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_finite(v) for v in obj]
    return obj


def as_json(obj: Any) -> Any:
    """``obj`` as :func:`write_json` stores it (numpy scalars as numbers, NaN/inf as null)."""
    return _finite(json.loads(json.dumps(obj, default=_json_default)))


def write_json(path: Path | str, obj: Any) -> None:
    write_text(path, json.dumps(as_json(obj), indent=2, sort_keys=True) + "\n")


def read_json(path: Path | str) -> Any:
    path = Path(path)
    if not path.exists():
        raise ArtifactError(f"{path}: missing (run the upstream stage first)")
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError as e:
        raise ArtifactError(f"{path}: corrupt JSON ({e})") from None


def write_text(path: Path | str, text: str) -> None:
    with atomic_path(path) as tmp:
        tmp.write_text(text)


def write_parquet(path: Path | str, df, schema) -> None:
    """Write a DataFrame with an explicit pyarrow schema (column set must match exactly)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    missing = [f.name for f in schema if f.name not in df.columns]
    extra = [c for c in df.columns if c not in schema.names]
    if missing or extra:
        raise ArtifactError(f"{path}: columns do not match schema (missing {missing}, unexpected {extra})")
    table = pa.Table.from_pandas(df[schema.names], schema=schema, preserve_index=False)
    with atomic_path(path) as tmp:
        pq.write_table(table, tmp)


def read_parquet(path: Path | str, schema=None):
    """Read a Parquet table; with ``schema``, fail clearly on missing columns or wrong types."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = Path(path)
    if not path.exists():
        raise ArtifactError(f"{path}: missing (run the upstream stage first)")
    try:
        table = pq.read_table(path)
    except (pa.ArrowInvalid, OSError) as e:
        raise ArtifactError(f"{path}: corrupt Parquet file ({e})") from None
    if schema is not None:
        missing = [f.name for f in schema if f.name not in table.schema.names]
        if missing:
            raise ArtifactError(f"{path}: missing column(s) {missing}; has {table.schema.names}")
        for f in schema:
            got = table.schema.field(f.name).type
            if not got.equals(f.type):
                raise ArtifactError(f"{path}: column '{f.name}' has type {got}, expected {f.type}")
        table = table.select(schema.names)
    return table.to_pandas()


def save_safetensors(path: Path | str, tensors: Mapping[str, Any], metadata: Mapping[str, str] | None = None) -> None:
    """Write a checkpoint whose bytes depend only on its tensors and metadata.

    safetensors serialises ``__metadata__`` from a Rust ``HashMap``, so its key order (and
    the file's hash) changes from one process to the next; the header is rewritten with the
    metadata keys sorted (tensor entries keep the library's own, deterministic order).
    """
    from safetensors.torch import save_file

    tensors = {k: v.detach().contiguous().cpu() for k, v in tensors.items()}
    with atomic_path(path) as tmp:
        raw = tmp.with_name(tmp.name + ".raw")  # `.<name>.tmp-*`: swept like the temporary itself
        try:
            save_file(tensors, str(raw), metadata=dict(metadata or {}))
            _write_sorted_header(raw, tmp)
        finally:
            raw.unlink(missing_ok=True)


def _write_sorted_header(src: Path, dest: Path) -> None:
    """Copy a safetensors file with its ``__metadata__`` keys in sorted order.

    Layout: 8-byte little-endian header length N, N bytes of JSON (space-padded so the
    data starts 8-byte aligned), then the tensor data, whose offsets are relative to the
    data start and so do not move when the header is rewritten.
    """
    with src.open("rb") as fin, dest.open("wb") as fout:
        n = int.from_bytes(fin.read(8), "little")
        header = json.loads(fin.read(n))
        if "__metadata__" in header:
            header["__metadata__"] = dict(sorted(header["__metadata__"].items()))
        text = json.dumps(header, separators=(",", ":"), ensure_ascii=False).encode()
        text += b" " * (-len(text) % 8)
        fout.write(len(text).to_bytes(8, "little"))
        fout.write(text)
        shutil.copyfileobj(fin, fout)


def load_safetensors(path: Path | str, expected_shapes: Mapping[str, tuple[int, ...]] | None = None):
    """Load tensors (never pickle); check names and shapes when ``expected_shapes`` is given."""
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    path = Path(path)
    if not path.exists():
        raise ArtifactError(f"{path}: missing (run the upstream stage first)")
    try:
        tensors = load_file(str(path))
    except (SafetensorError, OSError, ValueError) as e:
        raise ArtifactError(f"{path}: corrupt safetensors file ({e})") from None
    if expected_shapes is not None:
        problems = []
        for name, shape in expected_shapes.items():
            if name not in tensors:
                problems.append(f"missing tensor '{name}'")
            elif tuple(tensors[name].shape) != tuple(shape):
                problems.append(f"'{name}' has shape {tuple(tensors[name].shape)}, expected {tuple(shape)}")
        unexpected = sorted(set(tensors) - set(expected_shapes))
        if unexpected:
            problems.append(f"unexpected tensors {unexpected}")
        if problems:
            raise ArtifactError(f"{path}: checkpoint does not fit the model: " + "; ".join(problems))
    return tensors


def safetensors_metadata(path: Path | str) -> dict[str, str]:
    """The metadata of a safetensors file; a missing or unreadable file raises :class:`ArtifactError`."""
    from safetensors import safe_open

    path = Path(path)
    if not path.exists():
        raise ArtifactError(f"{path}: missing (run the upstream stage first)")
    try:
        with safe_open(str(path), framework="pt") as fh:
            return dict(fh.metadata() or {})
    except Exception as e:  # noqa: BLE001 - any failure to read the header is corruption
        raise ArtifactError(f"{path}: corrupt safetensors file ({e})") from None
