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
    if not isinstance(seed, int) or isinstance(seed, bool) or not 0 <= seed <= MAX_SEED:
        raise ParamsError(f"  seed: must be an integer in [0, {MAX_SEED}] (got {seed!r})")
    return seed


def load_section(track: str, model: type[M], path: Path | str = PARAMS_FILE) -> M:
    """Validated params of one track (raises :class:`ParamsError`)."""
    data = read_params_file(path)
    return validate_section(track, model, data.get(track))


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
        data = read_params_file(path)
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
