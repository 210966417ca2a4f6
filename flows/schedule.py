"""Serve the pipeline flow on a schedule, with a real local Prefect server.

Schedules need a real Prefect server (the temporary API that a plain flow call starts
cannot schedule), so this one command:

1. starts ``prefect server start`` on loopback with a SQLite database under ``.prefect/``
   (or uses ``--api-url`` if you already run a server),
2. points ``PREFECT_API_URL`` at it,
3. serves the ``paperworks-pipeline`` flow as a deployment with a cron (or interval)
   schedule, whose parameters can pick a profile, ``-S`` overrides and an experiment name,
   so each scheduled run can be a DVC experiment.

    python -m flows.schedule --cron "0 3 * * *"                      # nightly, whole DAG
    python -m flows.schedule --cron "0 * * * *" --targets 'control_*' --profile smoke

The UI (run history, logs, metric artifacts) is at http://127.0.0.1:4200 while it runs.
Ctrl-C stops the runner and the server it started.
"""
from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time
import urllib.request
from datetime import timedelta
from pathlib import Path


def wait_healthy(api_url: str, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"{api_url}/health", timeout=2) as resp:
                if resp.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.5)
    raise TimeoutError(f"Prefect server at {api_url} did not become healthy within {timeout:.0f} s")


def start_server(port: int, home: Path) -> subprocess.Popen:
    """``prefect server start`` on 127.0.0.1 with its SQLite database under ``home``."""
    home.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, PREFECT_HOME=str(home), PREFECT_SERVER_ANALYTICS_ENABLED="false")
    env.pop("PREFECT_API_URL", None)
    prefect = Path(sys.executable).with_name("prefect")
    log = open(home / "server.log", "ab")
    return subprocess.Popen(
        [str(prefect if prefect.exists() else "prefect"), "server", "start", "--host", "127.0.0.1", "--port", str(port)],
        env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
    )


def stop_server(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    when = ap.add_mutually_exclusive_group()
    when.add_argument("--cron", default=None, help='cron schedule (default "0 3 * * *")')
    when.add_argument("--interval", type=float, help="seconds between runs instead of a cron")
    ap.add_argument("--name", default="scheduled", help="deployment name")
    ap.add_argument("--targets", nargs="*", help="stage names or globs (default: every stage)")
    ap.add_argument("--profile", choices=("smoke", "default", "paper"))
    ap.add_argument("-S", "--set", dest="overrides", action="append", default=[], help="key.path=value")
    ap.add_argument("--experiment", help="save each run as a DVC experiment with this name")
    ap.add_argument("--repo", default=".", help="repository root the runs work in")
    ap.add_argument("--port", type=int, default=4200)
    ap.add_argument("--api-url", help="use this running Prefect server instead of starting one")
    ap.add_argument("--home", default=".prefect", help="PREFECT_HOME of the started server (SQLite lives here)")
    args = ap.parse_args(argv)

    server = None
    api_url = args.api_url
    if not api_url:
        api_url = f"http://127.0.0.1:{args.port}/api"
        server = start_server(args.port, Path(args.home).resolve())
    try:
        wait_healthy(api_url)
        # must be set before prefect builds its settings in this process
        os.environ["PREFECT_API_URL"] = api_url
        from flows.pipeline import pipeline

        schedule = {"interval": timedelta(seconds=args.interval)} if args.interval else {"cron": args.cron or "0 3 * * *"}
        print(f"serving '{pipeline.name}/{args.name}' on {api_url} ({schedule}); UI at {api_url[:-4]}", flush=True)
        pipeline.serve(
            name=args.name,
            parameters={
                "targets": args.targets,
                "profile": args.profile,
                "overrides": args.overrides,
                "experiment": args.experiment,
                "repo_root": str(Path(args.repo).resolve()),
            },
            **schedule,
        )
    finally:
        if server is not None:
            stop_server(server)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
