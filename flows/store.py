"""A shared artifact store for this work tree: ``python -m flows.store push|pull`` (``make push`` /
``make pull``).

The store is a DVC remote. By default it is a directory outside the work tree
(``$PAPERWORKS_REMOTE``, else ``~/paperworks-dvc-store``); any URL DVC understands works the
same way (``s3://bucket/path``, ``ssh://host/path``, an NFS mount). The remote is written to
``.dvc/config.local`` (never committed), so each machine names its own. After ``make run``,
``make push`` uploads every output ``dvc.lock`` records; on a fresh clone, ``make pull`` brings
them back, after which ``dvc status`` is clean, ``dvc repro`` has nothing to do and
``make report`` rebuilds the results without training.
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


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("action", choices=["push", "pull", "configure"])
    ap.add_argument("--remote", default=None, help="directory or DVC remote URL (default: $PAPERWORKS_REMOTE or ~/paperworks-dvc-store)")
    args = ap.parse_args(argv)
    remote = args.remote or default_remote()
    configure(remote)
    print(f"DVC remote '{REMOTE_NAME}' → {remote}")
    if args.action != "configure":
        dvc([args.action])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
