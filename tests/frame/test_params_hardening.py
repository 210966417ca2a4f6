"""Malformed params files are rejected with one clear error (issue 23, items 8 and 10).

A table of broken ``params.yaml`` files, each built from the valid smoke profile with one
thing wrong: YAML that does not parse (syntax, tabs, alias bombs, duplicate keys, size,
nesting, encoding), an empty file or a missing section, non-finite numbers, booleans and
floats where integers belong, counts no 2-core machine can work through, duplicate seeds,
inverted ranges, a storage URL that leaves the project. Every one must come back from
``validate_all`` (what ``make``/the flow run first) as error strings naming the key or the
file — no traceback, no "all sections valid" — and from ``load_section`` (what each stage
runs first) as a ``ParamsError``.
"""
from __future__ import annotations

import copy
import subprocess
import sys
from pathlib import Path
from typing import Any, Callable

import pytest
import yaml

from paperworks.core.params import ParamsError, global_seed, load_section, read_params_file, track_models, validate_all
from paperworks.core.profile import compose
from tests.conftest import REPO

SMOKE = compose("smoke", REPO / "conf")


def with_value(path: str, value: Any) -> Callable[[], str]:
    """The smoke params with ``path`` (dotted; ``-`` deletes) set to ``value``, as YAML."""

    def build() -> str:
        params = copy.deepcopy(SMOKE)
        *parents, last = path.split(".")
        node = params
        for key in parents:
            node = node[key]
        if value == "-":
            del node[last]
        else:
            node[last] = value
        return yaml.safe_dump(params, sort_keys=False)

    return build


def text(raw: str | bytes) -> Callable[[], str | bytes]:
    return lambda: raw


def smoke_then(extra: str) -> Callable[[], str]:
    return lambda: yaml.safe_dump(SMOKE, sort_keys=False) + extra


BOMB = "\n".join(
    ["a: &a [lol, lol, lol, lol, lol, lol, lol, lol, lol]"]
    + [f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join(['*' + chr(97 + i)] * 9)}]" for i in range(8)]
) + "\n"

# (case, file content, text the error must contain)
CASES: list[tuple[str, Callable[[], str | bytes], str]] = [
    # --- the file itself
    ("yaml syntax error", text("seed: [1, 2\ncontrol: {}\n"), "not valid YAML: line"),
    ("tab indentation", text("seed: 1\ncontrol:\n\tgrid: 1\n"), "not valid YAML: line 3"),
    ("alias bomb", text(BOMB), "aliases (*name) are not allowed"),
    ("one alias", smoke_then("x: &v 1\ny: *v\n"), "aliases (*name) are not allowed"),
    ("duplicate key", smoke_then("seed: 3\n"), "duplicate key 'seed'"),
    ("empty file", text(""), "empty"),
    ("only comments", text("# nothing here\n"), "empty"),
    ("top level is a list", text("- seed\n- 1\n"), "top level must be a mapping"),
    ("file over 1 MiB", smoke_then("#" + "x" * (1 << 20) + "\n"), "a params file may hold"),
    ("not UTF-8", text(b"seed: 1\nprofile: \xff\xfe\n"), "not UTF-8"),
    ("nested too deeply", text("seed: " + "[" * 50_000 + "]" * 50_000 + "\n"), "nested too deeply"),
    ("missing track section", with_value("person_search", "-"), "person_search: missing section"),
    ("missing global seed", with_value("seed", "-"), "seed: missing"),
    ("unknown section", smoke_then("contrl: {}\n"), "contrl: unknown section"),
    # --- finite numbers
    ("NaN in a sweep", with_value("control.rollouts.sigma_sweep", [0.0, float("nan")]), "control.rollouts.sigma_sweep.1: Input should be a finite number"),
    ("inf learning rate", with_value("control.teacher.learning_rate", float("inf")), "control.teacher.learning_rate: Input should be a finite number"),
    ("NaN as a range end", with_value("insurance.tune.warmup_range", [0.0, float("nan")]), "insurance.tune.warmup_range.1: Input should be a finite number"),
    ("-inf in a dict of weights", with_value("person_search.fusion.view_weights.scene", float("-inf")), "person_search.fusion.view_weights.scene: Input should be a finite number"),
    ("NaN temperature", with_value("selfdistill.eval.temperature", float("nan")), "selfdistill.eval.temperature: Input should be a finite number"),
    ("NaN global seed", with_value("seed", float("nan")), "seed: must be an integer"),
    # --- strict booleans and integers
    ("true as a depth", with_value("control.tree.max_depth", True), "control.tree.max_depth: Input should be a valid integer"),
    ("true as a step count", with_value("protocol_distill.online.steps", True), "protocol_distill.online.steps: Input should be a valid integer"),
    ("0.0 as a teacher index", with_value("control.grid.teachers", [0.0]), "control.grid.teachers.0: Input should be a valid integer"),
    ("2.5 as a count", with_value("selfdistill.base.batch_size", 2.5), "selfdistill.base.batch_size: Input should be a valid integer"),
    ("'7' as a depth", with_value("control.tree.max_depth", "7"), "control.tree.max_depth: Input should be a valid integer"),
    ("1 as a boolean", with_value("control.tree.pole_urgency", 1), "control.tree.pole_urgency: Input should be a valid boolean"),
    ("'yes' as a boolean", with_value("person_search.encoder.augment", "yes"), "person_search.encoder.augment: Input should be a valid boolean"),
    ("true as the global seed", with_value("seed", True), "seed: must be an integer"),
    ("3 as a loss name", with_value("insurance.grid.losses", [3]), "insurance.grid.losses.0"),
    # --- upper bounds a 2-core machine can hold
    ("10**9 persons", with_value("protocol_distill.world.n_persons", 10**9), "protocol_distill.world.n_persons: Input should be less than or equal to 1000000"),
    ("10**9 person families", with_value("person_search.data.n_train_families", 10**9), "person_search.data.n_train_families: Input should be less than or equal to 10000"),
    ("10**12 base steps", with_value("selfdistill.base.steps", 10**12), "selfdistill.base.steps: must be at most 100_000_000"),
    ("10**12 online steps", with_value("protocol_distill.online.steps", 10**12), "protocol_distill.online.steps: must be at most 100_000_000"),
    ("10**9 rollout steps", with_value("control.rollouts.steps_per_sigma", 10**9), "control.rollouts.steps_per_sigma: Input should be less than or equal to 10000000"),
    ("10**9 in a list", with_value("protocol_distill.seeds", [0, 10**9]), "protocol_distill.seeds: must be at most 100_000_000"),
    ("2000 sweep seeds", with_value("selfdistill.sweep.seeds", list(range(2000))), "selfdistill.sweep.seeds: may hold at most 1000 items"),
    ("global seed 2**40", with_value("seed", 2**40), "seed: must be an integer in [0, 4294967295]"),
    ("negative global seed", with_value("seed", -1), "seed: must be an integer"),
    # --- unique lists
    ("duplicate seeds", with_value("protocol_distill.seeds", [0, 0]), "protocol_distill.seeds: items must be distinct, [0] repeated"),
    ("duplicate opsd seeds", with_value("selfdistill.opsd.seeds", [1, 2, 1]), "selfdistill.opsd.seeds: items must be distinct"),
    ("duplicate teachers", with_value("control.grid.teachers", [0, 0]), "control.grid"),
    ("duplicate sweep alphas", with_value("selfdistill.sweep.alphas", [0.5, 0.5]), "selfdistill.sweep.alphas: items must be distinct"),
    ("duplicate backbones", with_value("person_search.encoder.backbones", ["cnn", "cnn"]), "person_search.encoder.backbones: items must be distinct"),
    ("duplicate ks", with_value("insurance.eval.ks", [1, 3, 3]), "insurance.eval.ks: items must be distinct"),
    # --- ordered ranges
    ("inverted lr range", with_value("insurance.tune.lr_range", [1e-3, 1e-5]), "insurance.tune: lr_range must be (low, high) with low <= high"),
    ("inverted epochs range", with_value("insurance.tune.epochs_range", [3, 1]), "insurance.tune: epochs_range must be (low, high)"),
    ("zero in a log-scale range", with_value("insurance.tune.lr_range", [0.0, 1e-4]), "insurance.tune: lr_range must lie within (0.0, 0.01]"),
    ("range past the train bound", with_value("insurance.tune.list_size_range", [4, 800]), "insurance.tune: list_size_range must lie within [2, 100]"),
    ("inverted per-service range", with_value("insurance.data.procedures_per_service", [4, 2]), "insurance.data: procedures_per_service must satisfy"),
    ("inverted percentiles", with_value("person_search.fusion.percentiles", [90.0, 50.0, 10.0]), "person_search.fusion: percentiles must be increasing"),
    # --- storage that would write outside the project (item 10)
    ("sqlite path escaping with ..", with_value("insurance.tune.storage", "sqlite:///../escape/optuna.db"), "insurance.tune.storage: the SQLite file must be a relative path inside the project"),
    ("sqlite absolute path", with_value("insurance.tune.storage", "sqlite:////tmp/optuna.db"), "insurance.tune.storage: the SQLite file must be a relative path"),
    ("sqlite .. after a folder", with_value("insurance.tune.storage", "sqlite:///data/../../optuna.db"), "insurance.tune.storage: the SQLite file must be a relative path"),
    ("in-memory sqlite", with_value("insurance.tune.storage", "sqlite:///:memory:"), "insurance.tune.storage: the SQLite file must be a relative path"),
    ("unknown storage scheme", with_value("insurance.tune.storage", "file:///etc/optuna.db"), "insurance.tune.storage: must be sqlite:///<path inside the project> or a server URL"),
]


def write_case(tmp_path: Path, build: Callable[[], str | bytes]) -> Path:
    f = tmp_path / "params.yaml"
    content = build()
    f.write_bytes(content if isinstance(content, bytes) else content.encode())
    return f


def test_the_table_is_large_and_the_base_is_valid(tmp_path: Path) -> None:
    assert len(CASES) >= 50 and len({c[0] for c in CASES}) == len(CASES)
    assert validate_all(write_case(tmp_path, with_value("profile", "smoke"))) == []


@pytest.mark.parametrize("case, build, expected", CASES, ids=[c[0] for c in CASES])
def test_malformed_params_file_is_rejected_clearly(case: str, build, expected: str, tmp_path: Path) -> None:
    f = write_case(tmp_path, build)
    errors = validate_all(f)  # never raises: one list of messages
    assert errors, f"{case}: reported valid"
    assert any(expected in e for e in errors), f"{case}: expected {expected!r} in:\n" + "\n".join(errors)
    assert all(len(e) < 2000 for e in errors), "an error message must stay readable"
    # the stages' own entry refuses too: the track named in the error, the global seed, or
    # (a file that does not parse) every track
    models = track_models()
    first = expected.split(":")[0].split(".")[0].strip()
    if first in models:
        with pytest.raises(ParamsError):
            load_section(first, models[first], f)
    elif first == "seed":
        with pytest.raises(ParamsError):
            global_seed(read_params_file(f))
    elif first != "contrl":
        for name, model in models.items():
            with pytest.raises(ParamsError):
                load_section(name, model, f)


@pytest.mark.parametrize("storage", [
    "sqlite:///data/insurance/optuna/optuna.db", "sqlite:///optuna.db?timeout=30",
    "postgresql://optuna@db.example:5432/studies", "postgresql+psycopg2://u@localhost/optuna", "mysql://u@h/db",
])
def test_storage_inside_the_project_or_a_server_is_accepted(storage: str, tmp_path: Path) -> None:
    assert validate_all(write_case(tmp_path, with_value("insurance.tune.storage", storage))) == []


def test_the_cli_exits_2_on_an_empty_file_instead_of_all_valid(tmp_path: Path) -> None:
    (tmp_path / "params.yaml").write_text("")
    proc = subprocess.run([sys.executable, "-m", "paperworks.core.params"], cwd=tmp_path, capture_output=True, text=True,
                          env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"}, timeout=120)
    assert proc.returncode == 2 and "empty" in proc.stderr and "all sections valid" not in proc.stdout
    assert "Traceback" not in proc.stderr
