"""Register the pipeline as a deployment on a Prefect *work pool* — the multi-machine setup.

A deployment runs the flow code of one checkout, in that checkout: ``--repo`` names it (default:
this one) and is stored in the deployment itself (its source and entrypoint), never as a run
parameter — anyone who may start a run chooses targets, a profile, overrides and an
experiment name, but not which ``dvc.yaml`` the worker's user executes.

The API must not be reachable without authentication. On the server machine::

    export PREFECT_SERVER_API_AUTH_STRING='paperworks:<a long random secret>'   # basic auth
    prefect server start --host <a private-network address>                    # not 0.0.0.0 on an open network
    prefect work-pool create --type process paperworks

On every machine that talks to it (workers, the deploying machine; same checkout path, same
venv, a shared DVC remote or cache)::

    export PREFECT_API_URL=http://<server>:4200/api
    export PREFECT_API_AUTH_STRING='paperworks:<the same secret>'
    python -m flows.deploy --pool paperworks --name nightly --cron "0 3 * * *" --targets 'control_*'
    prefect worker start --pool paperworks

Runs are then picked up by whichever worker polls first; two workers may run two tracks' runs
at once against one work tree (they share the project lock; a run that rewrites params.yaml
waits for the others). Inside a run, stages can also spread over a Dask cluster
(`python -m flows.pipeline --dask-address tcp://…`).
"""
from __future__ import annotations

import argparse
from pathlib import Path

import flows  # noqa: F401  (project Prefect home, analytics off)

CODE_ROOT = Path(__file__).resolve().parents[1]
ENTRYPOINT = "flows/pipeline.py:pipeline"


def deploy(pool: str, name: str, repo_root: Path = CODE_ROOT, cron: str | None = None, parameters: dict | None = None):
    """Deploy the flow of checkout ``repo_root``; its runs work in that checkout."""
    from prefect import flow

    repo_root = Path(repo_root).resolve()
    if not (repo_root / ENTRYPOINT.split(":")[0]).is_file():
        raise SystemExit(f"error: {repo_root} is not a paperworks checkout (no {ENTRYPOINT.split(':')[0]}); "
                         "a deployment runs the flow code of the checkout it works in")
    source_flow = flow.from_source(source=str(repo_root), entrypoint=ENTRYPOINT)
    return source_flow.deploy(
        name=name,
        work_pool_name=pool,
        cron=cron,
        parameters=parameters or {},
        build=False,
        push=False,
        print_next_steps=False,
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pool", required=True, help="an existing work pool of type 'process'")
    ap.add_argument("--name", default="pipeline")
    ap.add_argument("--cron")
    ap.add_argument("--repo", default=str(CODE_ROOT),
                    help="the checkout whose flow code runs, and whose DVC project it runs (same path on every worker)")
    ap.add_argument("--targets", nargs="*")
    ap.add_argument("--profile", choices=("smoke", "default", "paper"))
    ap.add_argument("-S", "--set", dest="overrides", action="append", default=[])
    ap.add_argument("--experiment")
    args = ap.parse_args(argv)
    deployment_id = deploy(args.pool, args.name, Path(args.repo), args.cron,
                           {"targets": args.targets, "profile": args.profile, "overrides": args.overrides,
                            "experiment": args.experiment})
    print(f"deployment paperworks-pipeline/{args.name} ({deployment_id}) on pool '{args.pool}'")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
