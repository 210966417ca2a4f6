"""One writer at a time per work tree: a readers-writer lock on ``.dvc/tmp/paperworks.lock``.

DVC hashes ``params.yaml`` when a stage *finishes*, not when the stage reads it. A run that
rewrites ``params.yaml`` (a profile switch, ``-S``) while another run's stage is working makes
``dvc.lock`` record values the outputs were not built with — ``dvc status`` is then clean and
the run cache poisoned. So:

- a run that changes params (or saves the workspace as an experiment) holds the lock
  **exclusively**, from before the rewrite until its last ``dvc.lock`` write;
- a run that only reproduces holds it **shared**: plain runs (two tracks at once, a work pool
  with two workers) overlap, but none overlaps a params rewrite.

``fcntl.flock`` locks belong to an open file description, so they also separate two runs in
one process (threads) and vanish when a process dies: a killed run never leaves the project
locked. Who holds or waits is written beside the lock (``paperworks.lock.d/``) only to say so
in messages. POSIX only (Linux, macOS), like the rest of the tool chain here.

From a shell (``make`` can wrap any command the same way)::

    python -m flows.project_lock -- dvc repro              # exclusive
    python -m flows.project_lock --shared -- dvc repro control_evaluate
"""
from __future__ import annotations

import argparse
import contextlib
import fcntl
import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

LOCK_RELPATH = Path(".dvc") / "tmp" / "paperworks.lock"


class ProjectLockTimeout(RuntimeError):
    """The project lock was not free within the time the caller allowed."""


def lock_path(repo_root: str | Path) -> Path:
    return Path(repo_root) / LOCK_RELPATH


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def holders(repo_root: str | Path) -> list[dict]:
    """Runs that hold or wait for the lock (entries of dead processes are dropped)."""
    out = []
    for f in sorted(lock_path(repo_root).with_suffix(".lock.d").glob("*.json")):
        try:
            info = json.loads(f.read_text())
        except (OSError, ValueError):
            continue
        if _alive(int(info.get("pid", -1))):
            out.append(info)
        else:
            f.unlink(missing_ok=True)
    return out


def describe(entries: list[dict]) -> str:
    return "; ".join(f"{e['state']} {e['mode']} by PID {e['pid']} ({e['purpose']}) since {e['since']}" for e in entries) or "no live holder recorded"


@contextlib.contextmanager
def project_lock(
    repo_root: str | Path,
    *,
    exclusive: bool,
    purpose: str,
    timeout: float | None = None,
    on_wait: Callable[[str], None] | None = None,
    poll_seconds: float = 0.5,
) -> Iterator[None]:
    """Hold the project lock (exclusive or shared) for the ``with`` block.

    Waits while another run holds it incompatibly, calling ``on_wait`` once with who holds it;
    after ``timeout`` seconds (``None``: no limit) raises :class:`ProjectLockTimeout` naming them.
    """
    path = lock_path(repo_root)
    path.parent.mkdir(parents=True, exist_ok=True)
    registry = path.with_suffix(".lock.d")
    registry.mkdir(exist_ok=True)
    mode = "exclusive" if exclusive else "shared"
    me = registry / f"{os.getpid()}-{uuid.uuid4().hex[:8]}.json"

    def record(state: str) -> None:
        info = {"id": me.stem, "pid": os.getpid(), "mode": mode, "state": state, "purpose": purpose,
                "since": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
        tmp = me.with_suffix(".tmp")
        tmp.write_text(json.dumps(info))
        tmp.replace(me)

    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        flag = fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH
        deadline = None if timeout is None else time.monotonic() + timeout
        told = False
        while True:
            try:
                fcntl.flock(fd, flag | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if not told:
                    record("waiting")  # only once really blocked: tests and messages rely on it
                others = [e for e in holders(repo_root) if e.get("id") != me.stem]
                if deadline is not None and time.monotonic() >= deadline:
                    raise ProjectLockTimeout(
                        f"the project is locked ({path}): {describe([e for e in others if e['state'] == 'holding'])}. "
                        f"This run ({purpose}) needs it {mode}; wait for that run to finish, or rerun with a longer lock timeout."
                    ) from None
                if not told and on_wait is not None:
                    on_wait(f"waiting for the project lock ({mode}) held by: {describe([e for e in others if e['state'] == 'holding'])}")
                told = True
                time.sleep(poll_seconds)
        record("holding")
        yield
    finally:
        me.unlink(missing_ok=True)
        os.close(fd)  # releases the flock


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shared", action="store_true", help="a run that does not change params.yaml")
    ap.add_argument("--timeout", type=float, default=None, help="give up after this many seconds (default: wait)")
    ap.add_argument("--repo", default=".")
    ap.add_argument("command", nargs=argparse.REMAINDER, help="-- command to run while holding the lock")
    args = ap.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        ap.error("give a command after --")
    try:
        with project_lock(args.repo, exclusive=not args.shared, purpose=" ".join(command), timeout=args.timeout,
                          on_wait=lambda msg: print(msg, file=sys.stderr, flush=True)):
            return subprocess.call(command)
    except ProjectLockTimeout as e:
        print(f"error: {e}", file=sys.stderr)
        return 3


if __name__ == "__main__":
    raise SystemExit(main())
