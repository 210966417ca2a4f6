"""Faster ``dvc.lock`` writes: parse the lock with ruamel's C loader instead of its pure-Python round-trip loader.

Before DVC writes ``dvc.lock`` after a stage it parses the whole file with ruamel's round-trip loader, so that
comments and formatting survive the rewrite (``dvc.utils.serialize._yaml.parse_yaml_for_update``), once per stage.
On this project's lock (≈ 0.85 MB: every stage's code and data deps) that loader takes ≈ 4.4 s, the C safe loader
≈ 1.0 s (`benchmarks/dvc_lock_write.py`). DVC writes ``dvc.lock`` itself, in block style and with no
comments, so for a comment-free ``dvc.lock`` the round trip keeps nothing the safe loader loses: DVC's dumper writes
the same bytes from either (tested on the committed lock and on a `dvc repro` with the hook on and off).
Everything else — ``params.yaml``, ``dvc.yaml``, a lock that holds a ``#`` — still goes through the round-trip loader.

`make setup` installs this as a ``.pth`` hook in the venv, so every DVC process started from the venv (``dvc repro``,
the Prefect flow's tasks, the tests) patches the function the moment DVC imports its module; nothing else is touched
and nothing is imported early. ``PAPERWORKS_DVC_LOCK_SPEEDUP=0`` turns it off.
"""
from __future__ import annotations

import importlib.abc
import importlib.util
import os
import sys

TARGET = "dvc.utils.serialize._yaml"


def lock_aware_parse(round_trip, safe):
    """``parse_yaml_for_update`` that takes the C safe loader for a comment-free ``dvc.lock``, ``round_trip`` otherwise."""
    def parse_yaml_for_update(text, path):
        if os.path.basename(os.fspath(path)) == "dvc.lock" and "#" not in text:
            return safe(text, path)
        return round_trip(text, path)

    parse_yaml_for_update.__wrapped__ = round_trip
    return parse_yaml_for_update


def patch(module) -> None:
    """Swap ``module.parse_yaml_for_update`` (DVC's ``_yaml`` module) once; ``modify_yaml`` looks it up at call time."""
    if not hasattr(module.parse_yaml_for_update, "__wrapped__"):
        module.parse_yaml_for_update = lock_aware_parse(module.parse_yaml_for_update, module.parse_yaml)


class _PatchAfterExec(importlib.abc.Loader):
    def __init__(self, inner):
        self.inner = inner

    def create_module(self, spec):
        return self.inner.create_module(spec)

    def exec_module(self, module) -> None:
        self.inner.exec_module(module)
        patch(module)


class _PatchOnImport(importlib.abc.MetaPathFinder):
    """Finds nothing itself: when DVC's ``_yaml`` module is imported it wraps the real loader so the module is patched
    right after it runs, then leaves ``sys.meta_path``."""

    def find_spec(self, name, path=None, target=None):
        if name != TARGET:
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        if spec is not None and spec.loader is not None:
            spec.loader = _PatchAfterExec(spec.loader)
        return spec


def install() -> None:
    if os.environ.get("PAPERWORKS_DVC_LOCK_SPEEDUP", "1") == "0":
        return
    if TARGET in sys.modules:
        patch(sys.modules[TARGET])
    elif not any(isinstance(f, _PatchOnImport) for f in sys.meta_path):
        sys.meta_path.insert(0, _PatchOnImport())


install()
