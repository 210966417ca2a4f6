"""Register the pipeline as a deployment on a Prefect *work pool* — the multi-machine setup.

On the server machine (or any machine that reaches it)::

    prefect server start --host 0.0.0.0                      # or Prefect Cloud
    export PREFECT_API_URL=http://<server>:4200/api
    prefect work-pool create --type process paperworks
    python -m flows.deploy --pool paperworks --name nightly --cron "0 3 * * *"

On every worker machine (same repository checkout, same venv, a shared DVC remote or cache)::

    export PREFECT_API_URL=http://<server>:4200/api
    prefect worker start --pool paperworks

Runs are then picked up by whichever worker polls first; inside a run, stages can also
spread over a Dask cluster (`python -m flows.pipeline --dask-address tcp://…`).
"""
from __future__ import annotations

import argparse
from pathlib import Path


def deploy(pool: str, name: str, repo_root: Path, cron: str | None = None, parameters: dict | None = None):
    from prefect import flow

    code_root = Path(__file__).resolve().parents[1]  # this checkout holds the flow's code
    source_flow = flow.from_source(source=str(code_root), entrypoint="flows/pipeline.py:pipeline")
    return source_flow.deploy(
        name=name,
        work_pool_name=pool,
        cron=cron,
        parameters={"repo_root": str(repo_root), **(parameters or {})},
        build=False,
        push=False,
        print_next_steps=False,
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pool", required=True, help="an existing work pool of type 'process'")
    ap.add_argument("--name", default="pipeline")
    ap.add_argument("--cron")
    ap.add_argument("--repo", default=".", help="the DVC repository the runs work in (same path on every worker)")
    ap.add_argument("--targets", nargs="*")
    ap.add_argument("--profile", choices=("smoke", "default", "paper"))
    ap.add_argument("-S", "--set", dest="overrides", action="append", default=[])
    args = ap.parse_args(argv)
    deployment_id = deploy(args.pool, args.name, Path(args.repo).resolve(), args.cron,
                           {"targets": args.targets, "profile": args.profile, "overrides": args.overrides})
    print(f"deployment paperworks-pipeline/{args.name} ({deployment_id}) on pool '{args.pool}'")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
