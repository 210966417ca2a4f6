"""Load one track's section of ``params.yaml`` and validate it with pydantic.

Every stage calls :func:`load_section` before doing any work, so a wrong value fails
with the key path and the allowed values and no output is touched.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, TypeVar, get_args, get_origin

import annotated_types
import yaml
from pydantic import BaseModel, ConfigDict, ValidationError, ValidationInfo, field_validator

PARAMS_FILE = Path("params.yaml")
GLOBAL_KEYS = ("profile", "seed")
# Frame-wide sections, validated like a track's: name → "module:Model" (imported lazily).
CORE_SECTIONS = {"evidence": "paperworks.core.claims:EvidenceParams"}

# Ceilings for what a 2-core, 24 GiB machine can work through. They apply to every field
# that does not state its own bound (a field with `le=`/`max_length=` uses that instead).
MAX_COUNT = 10**8          # any integer: steps, rows, persons, …
MAX_ITEMS = 1_000          # any list: seeds, grid points, sweep values
MAX_PARAMS_BYTES = 1 << 20  # params.yaml itself (today ~7 KB)
MAX_SEED = 2**32 - 1       # numpy's legacy seeding takes 32 bits

M = TypeVar("M", bound=BaseModel)


class ParamsError(ValueError):
    """A parameter is missing, mistyped or out of range."""


def _has_bound(field: Any, *kinds: type) -> bool:
    return any(isinstance(m, kinds) for m in field.metadata)


def _is_tuple(annotation: Any) -> bool:
    return annotation is tuple or get_origin(annotation) is tuple or any(_is_tuple(a) for a in get_args(annotation))


class StrictModel(BaseModel):
    """Base for every params model.

    - unknown keys are errors (catches typos);
    - strict types: ``true`` is not an integer, ``3.0`` is not a count, ``1`` is not a boolean
      (an int is still accepted for a float);
    - numbers are finite (``.nan``/``.inf`` rejected, also inside lists and dicts);
    - integers ≤ :data:`MAX_COUNT` and lists ≤ :data:`MAX_ITEMS` long unless the field states
      its own bound; list items distinct (seeds, grid points and sweep values name stages and
      runs: a duplicate silently collapses) unless the field allows repeats with
      ``Field(json_schema_extra={"repeats": True})``, like layer sizes.
    """

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True, allow_inf_nan=False)

    @field_validator("*", mode="before")
    @classmethod
    def _yaml_list_as_tuple(cls, value: Any, info: ValidationInfo) -> Any:
        # YAML has no tuples; strict mode would refuse the list it gives for a tuple field
        if isinstance(value, list) and _is_tuple(cls.model_fields[info.field_name].annotation):
            return tuple(value)
        return value

    @field_validator("*", mode="after")
    @classmethod
    def _bounded(cls, value: Any, info: ValidationInfo) -> Any:
        field = cls.model_fields[info.field_name]
        items = list(value.values()) if isinstance(value, dict) else list(value) if isinstance(value, (list, tuple)) else [value]
        if not _has_bound(field, annotated_types.Le, annotated_types.Lt) or isinstance(value, (list, tuple, dict)):
            too_big = [v for v in items if isinstance(v, int) and not isinstance(v, bool) and abs(v) > MAX_COUNT]
            if too_big:
                raise ValueError(f"must be at most {MAX_COUNT:_} in magnitude (10**8, the most a 2-core machine "
                                 f"works through), got {too_big[0]:_}")
        if isinstance(value, list):
            if not _has_bound(field, annotated_types.MaxLen) and len(value) > MAX_ITEMS:
                raise ValueError(f"may hold at most {MAX_ITEMS} items (a grid or sweep no 2-core machine "
                                 f"finishes beyond that), got {len(value)}")
            repeats_ok = (field.json_schema_extra or {}).get("repeats", False) if isinstance(field.json_schema_extra, dict) else False
            hashable = [v for v in value if isinstance(v, (int, float, str, bool))]
            if not repeats_ok and len(hashable) == len(value) and len(set(hashable)) != len(hashable):
                dups = sorted({v for v in hashable if hashable.count(v) > 1}, key=str)
                raise ValueError(f"items must be distinct, {dups} repeated")
        return value


class _NoAliasLoader(yaml.SafeLoader):
    """Safe YAML that refuses aliases (an alias bomb expands exponentially) and duplicate keys
    (YAML keeps the last one silently)."""

    def compose_node(self, parent, index):  # type: ignore[override]
        if self.check_event(yaml.AliasEvent):
            mark = self.peek_event().start_mark
            raise ParamsError(f"line {mark.line + 1}, column {mark.column + 1}: YAML aliases (*name) are not "
                              "allowed in params; write the value out")
        return super().compose_node(parent, index)

    def construct_mapping(self, node, deep=False):  # type: ignore[override]
        seen = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if key in seen:
                mark = key_node.start_mark
                raise ParamsError(f"line {mark.line + 1}, column {mark.column + 1}: duplicate key '{key}'")
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


def load_yaml_text(text: str, where: str) -> Any:
    """Parse params YAML; every problem is one :class:`ParamsError` naming ``where``."""
    try:
        return yaml.load(text, Loader=_NoAliasLoader)  # noqa: S506 — a SafeLoader subclass
    except ParamsError as e:
        raise ParamsError(f"{where}: {e}") from None
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark
        at = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
        raise ParamsError(f"{where}: not valid YAML: {at}{e.problem or e.context}") from None
    except yaml.YAMLError as e:
        raise ParamsError(f"{where}: not valid YAML: {e}") from None
    except RecursionError:
        raise ParamsError(f"{where}: YAML nested too deeply") from None


def read_params_file(path: Path | str = PARAMS_FILE) -> dict[str, Any]:
    """The parsed params file; inside a DVC stage, a view of the keys the stage declares
    (:func:`declared_view`)."""
    return declared_view(_read_params_file(path), "")


def _read_params_file(path: Path | str = PARAMS_FILE) -> dict[str, Any]:
    path = Path(path)
    if not path.exists():
        raise ParamsError(f"{path} not found (run from the repository root)")
    size = path.stat().st_size
    if size > MAX_PARAMS_BYTES:
        raise ParamsError(f"{path}: {size:_} bytes, more than the {MAX_PARAMS_BYTES:_} a params file may hold")
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise ParamsError(f"{path}: not UTF-8 text ({e.reason} at byte {e.start})") from None
    data = load_yaml_text(text, str(path))
    if data is None:
        raise ParamsError(f"{path}: empty (regenerate it with `python -m paperworks.core.profile default`)")
    if not isinstance(data, dict):
        raise ParamsError(f"{path}: top level must be a mapping, got {type(data).__name__}")
    return data


def format_validation_error(prefix: str, err: ValidationError) -> str:
    """One line per problem: ``control.tree.max_depth: Input should be ≥ 1 (got 0)``."""
    lines = []
    for e in err.errors():
        loc = ".".join(str(p) for p in (prefix, *e["loc"]) if p != "")
        got = e.get("input")
        shown = repr(got)
        # a whole section echoed back hides the message; the key path already says where
        shown = "" if e["type"] == "missing" or isinstance(got, dict) else f" (got {shown[:120]}{'…' if len(shown) > 120 else ''})"
        lines.append(f"  {loc}: {e['msg'].removeprefix('Value error, ')}{shown}")
    return "invalid parameters in params.yaml:\n" + "\n".join(lines)


def validate_section(track: str, model: type[M], raw: Any) -> M:
    if raw is None:
        raise ParamsError(f"params.yaml has no '{track}' section")
    try:
        return model.model_validate(raw)
    except ValidationError as err:
        raise ParamsError(format_validation_error(track, err)) from None


def global_seed(data: dict[str, Any]) -> int:
    if "seed" not in data:  # never a silent default: every stage derives its seeds from it
        raise ParamsError("  seed: missing (the global seed every stage derives its own from)")
    seed = data["seed"]
    if isinstance(seed, UndeclaredParam):
        seed.fail()
    if not isinstance(seed, int) or isinstance(seed, bool) or not 0 <= seed <= MAX_SEED:
        raise ParamsError(f"  seed: must be an integer in [0, {MAX_SEED}] (got {seed!r})")
    return seed


def load_section(track: str, model: type[M], path: Path | str = PARAMS_FILE) -> M:
    """Validated params of one track (raises :class:`ParamsError`)."""
    data = _read_params_file(path)
    return declared_view(validate_section(track, model, data.get(track)), track)


def core_models() -> dict[str, type[BaseModel]]:
    import importlib

    out = {}
    for name, ref in CORE_SECTIONS.items():
        module, model = ref.split(":")
        out[name] = getattr(importlib.import_module(module), model)
    return out


def track_models() -> dict[str, type[BaseModel]]:
    """Every track's params model, found by convention: ``paperworks.<track>.params.Params``."""
    import importlib
    import pkgutil

    import paperworks

    models: dict[str, type[BaseModel]] = {}
    for info in pkgutil.iter_modules(paperworks.__path__):
        if info.name == "core" or not info.ispkg:
            continue
        try:
            mod = importlib.import_module(f"paperworks.{info.name}.params")
        except ModuleNotFoundError:
            continue
        if hasattr(mod, "Params"):
            models[info.name] = mod.Params
    return models


def validate_all(path: Path | str = PARAMS_FILE) -> list[str]:
    """Validate every track's section; return the error messages (empty when all good)."""
    try:
        data = _read_params_file(path)
    except ParamsError as e:
        return [str(e)]
    errors = []
    try:
        global_seed(data)
    except ParamsError as e:
        errors.append(str(e))
    models = track_models()
    core = core_models()
    for key in data:
        if key not in GLOBAL_KEYS and key not in models and key not in core:
            errors.append(f"  {key}: unknown section (tracks: {', '.join(sorted(models))}; frame: {', '.join(sorted(core))})")
    for name, model in core.items():
        try:
            validate_section(name, model, data.get(name))
        except ParamsError as e:
            errors.append(str(e))
    for track, model in models.items():
        if track not in data:
            errors.append(f"  {track}: missing section (every track's stages read their own)")
            continue
        try:
            validate_section(track, model, data[track])
        except ParamsError as e:
            errors.append(str(e))
    return errors


# ---- param deps: a stage reads only the keys its dvc.yaml entry declares (issue 22, item 7) ----
# DVC reruns a stage when a param it declares changes, and only then. A stage that reads an
# undeclared key goes stale silently; one that declares a whole section reruns for keys it never
# reads. So inside a DVC stage (DVC exports DVC_STAGE=<stage name> to every command) the loaders
# above validate the whole section as before, then hand the stage a view where every key its
# `params:` entry does not cover is an UndeclaredParam, which fails naming the key when used.
# Hand-written rather than read from DVC's own resolver: `Repo().stage.collect` costs seconds per
# stage start, and this project's dvc.yaml uses only `matrix:` over params lists and literals.
STAGE_ENV = "DVC_STAGE"
GUARD_ENV = "PAPERWORKS_PARAMS_GUARD"  # "off" disables the view (debugging only)


class UndeclaredParam:
    """Stands for a params key the running stage does not declare: any use of it raises
    :class:`ParamsError` naming the key and the stage. Passing it along unused is allowed."""

    __slots__ = ("key", "stage")

    def __init__(self, key: str, stage: str) -> None:
        object.__setattr__(self, "key", key)
        object.__setattr__(self, "stage", stage)

    def fail(self, *_: Any, **__: Any) -> Any:
        raise ParamsError(f"stage '{self.stage}' reads params key '{self.key}', which its `params:` in "
                          f"dvc.yaml do not declare (declare '{self.key}' or a section above it)")

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):  # protocol probes (copy, numpy, pydantic) see a plain object
            raise AttributeError(name)
        return UndeclaredParam(f"{self.key}.{name}", self.stage)  # fails when used, naming the leaf

    def __getitem__(self, name: Any) -> Any:
        return UndeclaredParam(f"{self.key}.{name}", self.stage)

    def __repr__(self) -> str:
        return f"<undeclared param {self.key}>"

    __bool__ = __int__ = __float__ = __index__ = __complex__ = __str__ = __format__ = __bytes__ = fail
    __iter__ = __len__ = __contains__ = __call__ = __hash__ = __round__ = fail
    __eq__ = __ne__ = __lt__ = __le__ = __gt__ = __ge__ = fail
    __add__ = __radd__ = __sub__ = __rsub__ = __mul__ = __rmul__ = __truediv__ = __rtruediv__ = fail
    __floordiv__ = __rfloordiv__ = __mod__ = __rmod__ = __pow__ = __rpow__ = __neg__ = __pos__ = __abs__ = fail


def _lookup(data: Any, dotted: str) -> Any:
    for part in dotted.split("."):
        if not isinstance(data, dict) or part not in data:
            raise ParamsError(f"dvc.yaml refers to '{dotted}', which params.yaml does not have")
        data = data[part]
    return data


def _interpolate(text: str, context: dict[str, Any]) -> Any:
    import re

    whole = re.fullmatch(r"\$\{\s*([\w.]+)\s*\}", text)
    if whole:
        return _lookup(context, whole.group(1))
    return re.sub(r"\$\{\s*([\w.]+)\s*\}", lambda m: str(_lookup(context, m.group(1))), text)


def _dvc_str(value: Any) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


def stage_params(addressing: str, dvc_yaml: Path | str = "dvc.yaml", data: dict[str, Any] | None = None,
                 with_matrix: bool = False) -> tuple[str, ...] | None:
    """The params.yaml keys the stage named ``addressing`` (``name`` or ``name@matrix-key``, as
    DVC names it) declares in ``dvc_yaml``; None when the file has no such stage.

    ``with_matrix`` adds the keys its ``matrix:`` draws from (``${control.grid.teachers}``): a stage
    may check its own item against them (``--teacher 3`` not in the grid is a bad call), and
    declaring them would rerun every item when one is added."""
    import re

    from itertools import product

    path = Path(dvc_yaml)
    if not path.exists():
        return None
    stages = (yaml.safe_load(path.read_text(encoding="utf-8")) or {}).get("stages", {})
    name, _, key = addressing.rpartition(":")[2].partition("@")
    stage = stages.get(name)
    if stage is None:
        return None
    data = _read_params_file() if data is None else data
    context: dict[str, Any] = dict(data)
    if key:
        if "matrix" not in stage:
            return None
        matrix = {k: _interpolate(v, data) if isinstance(v, str) else v for k, v in stage["matrix"].items()}
        # DVC's name of a combination: values joined by '-', a list/dict value as <key><index>
        for combo in product(*(list(enumerate(v)) for v in matrix.values())):
            frags = [f"{k}{i}" if isinstance(v, (list, dict)) else _dvc_str(v) for k, (i, v) in zip(matrix, combo)]
            if "-".join(frags) == key:
                context["item"] = {k: v for k, (_, v) in zip(matrix, combo)}
                break
        else:
            return None
    keys: list[str] = []
    if with_matrix:
        for v in (stage.get("matrix") or {}).values():
            ref = re.fullmatch(r"\$\{\s*([\w.]+)\s*\}", v) if isinstance(v, str) else None
            keys += [ref.group(1)] if ref else []
    for entry in stage.get("params", []) or []:
        if isinstance(entry, str):
            keys.append(str(_interpolate(entry, context)))
        elif isinstance(entry, dict):  # {file: [keys]}: only params.yaml is this module's business
            for file, file_keys in entry.items():
                if Path(file).name == PARAMS_FILE.name:
                    keys.extend(str(_interpolate(k, context)) for k in file_keys or [])
    return tuple(keys)


_DECLARED: dict[tuple[str, str], tuple[str, ...] | None] = {}


def current_stage_params() -> tuple[str, tuple[str, ...]] | None:
    """(stage, declared keys) when running as a DVC stage of this repository's dvc.yaml with the
    guard on; None otherwise."""
    import os

    stage = os.environ.get(STAGE_ENV)
    if not stage or os.environ.get(GUARD_ENV, "").lower() in ("off", "0", "false"):
        return None
    cache_key = (stage, os.getcwd())
    if cache_key not in _DECLARED:
        _DECLARED[cache_key] = stage_params(stage, with_matrix=True)
    declared = _DECLARED[cache_key]
    return None if declared is None else (stage, declared)


def restrict(value: Any, path: str, declared: tuple[str, ...], stage: str) -> Any:
    """``value`` (a params model, dict or leaf at dotted ``path``; "" for the whole file) with every
    key not covered by ``declared`` replaced by an :class:`UndeclaredParam`."""
    if path and any(path == d or path.startswith(d + ".") for d in declared):
        return value
    if path and not any(d.startswith(path + ".") for d in declared):
        return UndeclaredParam(path, stage)
    join = (lambda k: f"{path}.{k}") if path else str
    if isinstance(value, BaseModel):
        fields = {name: restrict(getattr(value, name), join(name), declared, stage) for name in type(value).model_fields}
        return type(value).model_construct(_fields_set=value.model_fields_set, **fields)
    if isinstance(value, dict):
        return {k: restrict(v, join(k), declared, stage) for k, v in value.items()}
    return UndeclaredParam(path, stage)


def declared_view(value: Any, path: str) -> Any:
    """``value`` as the running DVC stage may see it (itself outside a stage)."""
    current = current_stage_params()
    if current is None:
        return value
    stage, declared = current
    return restrict(value, path, declared, stage)


STAMP_TEXT = "params.yaml passed paperworks.core.params\n"  # constant: its hash never changes


def main(argv: list[str] | None = None) -> int:
    """``python -m paperworks.core.params [--stamp PATH]``: validate every section; exit 2 on errors.

    With ``--stamp`` it also writes a small file of constant content after a pass. As the
    output of a root DVC stage that every stage depends on, it makes DVC validate params
    before it deletes any stage's outputs (DVC removes outputs before running a stage), and,
    its content never changing, it reruns nothing downstream by itself.
    """
    import argparse
    import sys

    ap = argparse.ArgumentParser(description="Validate params.yaml (every track section and the global seed).")
    ap.add_argument("--file", default=str(PARAMS_FILE), help="params file (default: params.yaml)")
    ap.add_argument("--stamp", help="write this file after a pass (the output of a root DVC stage)")
    args = ap.parse_args(argv)
    errors = validate_all(args.file)
    if errors:
        print("\n".join(errors), file=sys.stderr)
        return 2
    if args.stamp:
        from paperworks.core.io import write_text

        write_text(args.stamp, STAMP_TEXT)
    print(f"{args.file}: all sections valid")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
