"""Serve the pipeline flow on a schedule, with a real local Prefect server.

Schedules need a real Prefect server (the temporary API that a plain flow call starts
cannot schedule), so this one command:

1. starts ``prefect server start`` on loopback with a SQLite database under the project's
   ``.prefect/`` (or uses ``--api-url`` if you already run a server); ``--host`` other than
   loopback is refused unless ``PREFECT_SERVER_API_AUTH_STRING`` (basic auth) is set,
2. points ``PREFECT_API_URL`` at it,
3. serves the ``paperworks-pipeline`` flow as a deployment with a cron (or interval)
   schedule, whose parameters can pick a profile, ``-S`` overrides and an experiment name,
   so each scheduled run can be a DVC experiment. The repository it works in (``--repo``)
   is fixed here, when the deployment is made; it is not a run parameter.

    python -m flows.schedule --cron "0 3 * * *"                      # nightly, whole DAG
    python -m flows.schedule --cron "0 * * * *" --targets 'control_*' --profile smoke

The UI (run history, logs, metric artifacts) is at http://127.0.0.1:4200 while it runs.
Ctrl-C stops the runner and the server it started.
"""
from __future__ import annotations

import argparse
import base64
import ipaddress
import os
import signal
import subprocess
import sys
import time
import urllib.request
from datetime import timedelta
from pathlib import Path

import flows  # noqa: F401  (project Prefect home, startup timeout, analytics off: before prefect loads)

LOOPBACK_NAMES = {"localhost"}


def check_bind(host: str, environ: dict[str, str] | os._Environ = os.environ) -> None:
    """Refuse to serve the API beyond this machine without basic authentication.

    Anyone who reaches an unauthenticated Prefect API can start runs (the pipeline executes
    ``dvc.yaml`` commands as the server's user) and read every log and artifact.
    """
    try:
        loopback = ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = host in LOOPBACK_NAMES
    if not loopback and not environ.get("PREFECT_SERVER_API_AUTH_STRING"):
        raise SystemExit(
            f"error: refusing to serve the Prefect API on {host} without authentication: set "
            "PREFECT_SERVER_API_AUTH_STRING='user:<secret>' here and PREFECT_API_AUTH_STRING to the same value "
            "on every client (docs/orchestration.md)"
        )


def _auth_headers() -> dict[str, str]:
    auth = os.environ.get("PREFECT_API_AUTH_STRING") or os.environ.get("PREFECT_SERVER_API_AUTH_STRING")
    return {"Authorization": "Basic " + base64.b64encode(auth.encode()).decode()} if auth else {}


def wait_healthy(api_url: str, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            req = urllib.request.Request(f"{api_url}/health", headers=_auth_headers())
            with urllib.request.urlopen(req, timeout=2) as resp:
                if resp.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.5)
    raise TimeoutError(f"Prefect server at {api_url} did not become healthy within {timeout:.0f} s")


def start_server(port: int, home: Path, host: str = "127.0.0.1") -> subprocess.Popen:
    """``prefect server start`` on ``host`` (loopback by default) with its SQLite database under ``home``.

    Not ``prefect server start --background``: that detaches the server from this command (it
    outlives Ctrl-C or a crash here until someone runs ``prefect server stop``) and keeps one
    background server per Prefect home; here the server lives exactly as long as the schedule
    that needs it (its own process group, stopped in ``finally``), with its log in
    ``<home>/server.log``. For a server that outlives the schedule, start one yourself (with or
    without ``--background``) and pass ``--api-url``.
    """
    check_bind(host)
    home.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, PREFECT_HOME=str(home), PREFECT_SERVER_ANALYTICS_ENABLED="false", DO_NOT_TRACK="1")
    env.pop("PREFECT_API_URL", None)
    prefect = Path(sys.executable).with_name("prefect")
    log = open(home / "server.log", "ab")
    return subprocess.Popen(
        [str(prefect if prefect.exists() else "prefect"), "server", "start", "--host", host, "--port", str(port)],
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
    ap.add_argument("--repo", default=str(flows.PROJECT_ROOT), help="repository root the runs work in (fixed for this deployment)")
    ap.add_argument("--port", type=int, default=4200)
    ap.add_argument("--host", default="127.0.0.1", help="address the started server binds (non-loopback needs basic auth)")
    ap.add_argument("--api-url", help="use this running Prefect server instead of starting one")
    ap.add_argument("--home", default=os.environ["PREFECT_HOME"], help="PREFECT_HOME of the started server (SQLite lives here)")
    args = ap.parse_args(argv)

    server = None
    api_url = args.api_url
    if not api_url:
        api_url = f"http://{'127.0.0.1' if args.host in ('0.0.0.0', '::') else args.host}:{args.port}/api"
        server = start_server(args.port, Path(args.home).resolve(), args.host)
    try:
        wait_healthy(api_url)
        # must be set before prefect builds its settings in this process
        os.environ["PREFECT_API_URL"] = api_url
        if os.environ.get("PREFECT_SERVER_API_AUTH_STRING"):
            os.environ.setdefault("PREFECT_API_AUTH_STRING", os.environ["PREFECT_SERVER_API_AUTH_STRING"])
        from flows.pipeline import build_flow

        pipeline = build_flow(repo_root=args.repo)  # the deployment's repository: not a run parameter

        schedule = {"interval": timedelta(seconds=args.interval)} if args.interval else {"cron": args.cron or "0 3 * * *"}
        print(f"serving '{pipeline.name}/{args.name}' on {api_url} ({schedule}); UI at {api_url[:-4]}", flush=True)
        pipeline.serve(
            name=args.name,
            parameters={
                "targets": args.targets,
                "profile": args.profile,
                "overrides": args.overrides,
                "experiment": args.experiment,
            },
            **schedule,
        )
    finally:
        if server is not None:
            stop_server(server)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
