"""A shared artifact store for this work tree: ``python -m flows.store push|pull`` (``make push`` /
``make pull``).

The store is a DVC remote. By default it is a directory outside the work tree
(``$PAPERWORKS_REMOTE``, else ``~/paperworks-dvc-store``); any URL DVC understands works the
same way (``s3://bucket/path``, ``ssh://host/path``, an NFS mount). The remote is written to
``.dvc/config.local`` (never committed), so each machine names its own. After ``make run``,
``make push`` uploads every output ``dvc.lock`` records; on a fresh clone, ``make pull`` brings
them back, after which ``dvc status`` is clean, ``dvc repro`` has nothing to do and
``make report`` rebuilds the results without training.

``--glob 'control_*'`` (``make push T='control_*'``) moves only the outputs of the matching stages
and of every stage upstream of them, selected as ``make run``'s ``--targets`` selects them. A pull of
the whole store needs every stage of ``dvc.lock`` in it: after a run of some tracks, DVC counts the
other tracks' outputs as missing and the pull fails, so name the tracks that ran.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

REMOTE_NAME = "store"


def default_remote() -> str:
    return os.environ.get("PAPERWORKS_REMOTE") or str(Path.home() / "paperworks-dvc-store")


def configure(remote: str, repo: Path = Path(".")) -> None:
    """Point this work tree's default DVC remote at ``remote`` (a directory is created if missing)."""
    if "://" not in remote:
        remote = str(Path(remote).expanduser().resolve())
        Path(remote).mkdir(parents=True, exist_ok=True)
    dvc(["remote", "add", "--local", "--default", "--force", REMOTE_NAME, remote], repo)


def dvc(args: list[str], repo: Path = Path(".")) -> None:
    exe = Path(sys.executable).parent / "dvc"
    proc = subprocess.run([str(exe) if exe.exists() else "dvc", *args], cwd=repo, text=True, capture_output=True)
    out = (proc.stdout + proc.stderr).strip()
    if out:
        print(out)
    if proc.returncode != 0:
        raise SystemExit(f"error: dvc {' '.join(args)} failed ({proc.returncode})")


def selected_stages(patterns: list[str], repo: Path = Path(".")) -> list[str]:
    """The stages matching ``patterns`` (names or shell-style globs) and everything upstream, as the
    flow's ``--targets`` select them. (DVC's own ``push --glob`` matches file paths, not stage names.)"""
    from flows.pipeline import read_dag, select_stages

    try:
        return select_stages(read_dag(repo), patterns)
    except ValueError as err:
        raise SystemExit(f"error: {err}") from None


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("action", choices=["push", "pull", "configure"])
    ap.add_argument("--remote", default=None, help="directory or DVC remote URL (default: $PAPERWORKS_REMOTE or ~/paperworks-dvc-store)")
    ap.add_argument("--glob", action="append", default=[], metavar="PATTERN",
                    help="only the stages matching this pattern (repeatable), with their upstream stages")
    args = ap.parse_args(argv)
    remote = args.remote or default_remote()
    configure(remote)
    print(f"DVC remote '{REMOTE_NAME}' → {remote}")
    if args.action != "configure":
        dvc([args.action, *(selected_stages(args.glob) if args.glob else [])])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
