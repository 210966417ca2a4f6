"""Load one track's section of ``params.yaml`` and validate it with pydantic.

Every stage calls :func:`load_section` before doing any work, so a wrong value fails
with the key path and the allowed values and no output is touched.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, ConfigDict, ValidationError

PARAMS_FILE = Path("params.yaml")
GLOBAL_KEYS = ("profile", "seed")
# Frame-wide sections, validated like a track's: name → "module:Model" (imported lazily).
CORE_SECTIONS = {"evidence": "paperworks.core.claims:EvidenceParams"}

M = TypeVar("M", bound=BaseModel)


class ParamsError(ValueError):
    """A parameter is missing, mistyped or out of range."""


class StrictModel(BaseModel):
    """Base for every params model: unknown keys are errors (catches typos)."""

    model_config = ConfigDict(extra="forbid", frozen=True)


def read_params_file(path: Path | str = PARAMS_FILE) -> dict[str, Any]:
    path = Path(path)
    if not path.exists():
        raise ParamsError(f"{path} not found (run from the repository root)")
    with path.open() as fh:
        data = yaml.safe_load(fh) or {}
    if not isinstance(data, dict):
        raise ParamsError(f"{path}: top level must be a mapping, got {type(data).__name__}")
    return data


def format_validation_error(prefix: str, err: ValidationError) -> str:
    """One line per problem: ``control.tree.max_depth: Input should be ≥ 1 (got 0)``."""
    lines = []
    for e in err.errors():
        loc = ".".join(str(p) for p in (prefix, *e["loc"]) if p != "")
        got = e.get("input")
        shown = "" if e["type"] == "missing" else f" (got {got!r})"
        lines.append(f"  {loc}: {e['msg']}{shown}")
    return "invalid parameters in params.yaml:\n" + "\n".join(lines)


def validate_section(track: str, model: type[M], raw: Any) -> M:
    if raw is None:
        raise ParamsError(f"params.yaml has no '{track}' section")
    try:
        return model.model_validate(raw)
    except ValidationError as err:
        raise ParamsError(format_validation_error(track, err)) from None


def global_seed(data: dict[str, Any]) -> int:
    seed = data.get("seed", 0)
    if not isinstance(seed, int) or isinstance(seed, bool) or seed < 0:
        raise ParamsError(f"  seed: must be a non-negative integer (got {seed!r})")
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
    data = read_params_file(path)
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
            continue
        try:
            validate_section(track, model, data[track])
        except ParamsError as e:
            errors.append(str(e))
    return errors


def main() -> int:
    import sys

    errors = validate_all()
    if errors:
        print("\n".join(errors), file=sys.stderr)
        return 2
    print("params.yaml: all sections valid")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
