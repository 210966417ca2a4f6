"""A Prefect deployment that runs ONE version cycle of the mol loop per scheduled run.

Each run of the flow ``mol-version-cycle``:

1. brings the stages the loop reads up to date through DVC — the upstream of ``mol_versions`` as DVC reads it from
   ``dvc.yaml`` (``params_check``, ``mol_data``, ``mol_base``, ``mol_train@<mol.versions.seed>``), each as the pipeline
   flow runs a stage (``dvc --wait-for-lock repro --single-item``; DVC decides what is up to date);
2. runs the next configured cycle (``mol.versions.cycles``) on the **live version store** ``data/mol/live`` — the
   deployment's own state, not a DVC output (``data/mol/versions`` is the DVC record of the whole loop and is never
   written here). The first run starts it at v0 (the specialists of ``mol.versions.seed``); cycle ``k`` audits the
   same traffic, trains on the same data and meets the same contract as cycle ``k`` of the stage
   (``paperworks.mol.loop.Loop.cycle``). Once every configured cycle ran, a run changes nothing and says so;
3. publishes the lineage as a markdown artifact.

The HTTP endpoint serves the live store with ``python -m paperworks.mol.service --serve 8766 --store data/mol/live``
(it re-reads ``serving.json`` on every request, so an accepted cycle is served from the next request on), and
``python -m paperworks.mol.versions rollback v0 --root data/mol/live`` rolls it back.

    python -m flows.mol_cycle --once                       # one cycle now (a temporary local API)
    python -m flows.mol_cycle --cron "0 4 * * *"           # serve on a schedule: starts `prefect server start` on loopback
    python -m flows.mol_cycle --interval 3600 --api-url http://127.0.0.1:4200/api   # on a server already running

As in ``flows.schedule``, a schedule needs a real Prefect server; this command starts one on loopback (SQLite under
the project's ``.prefect/``) unless ``--api-url`` names one, and stops it on Ctrl-C.
"""
from __future__ import annotations

import argparse
import contextlib
import os
import sys
import tempfile
from datetime import timedelta
from pathlib import Path

import flows  # noqa: F401  (project Prefect home, startup timeout, analytics off: before prefect loads)

# prefect (and flows.pipeline, which imports it) load inside the functions: `main` must set PREFECT_API_URL first
REPO_ROOT = Path(__file__).resolve().parents[1]
LIVE = "data/mol/live"
LOOP_STAGE = "mol_versions"
FLOW_NAME = "mol-version-cycle"


def upstream_of(dag: dict[str, list[str]], stage: str = LOOP_STAGE) -> list[str]:
    """The stages ``stage`` reads, in topological order (from the DAG DVC reads out of dvc.yaml), without it."""
    from flows.pipeline import select_stages

    return [s for s in select_stages(dag, [stage]) if s != stage]


def live_store_path(root: Path, store: str) -> Path:
    """``store`` resolved under ``root/data/mol``; the DVC-owned stores and anything outside are refused."""
    path = (root / store).resolve()
    mol = (root / "data" / "mol").resolve()
    owned = {mol / d for d in ("versions", "world", "train", "router", "fifth")}
    if not path.is_relative_to(mol) or path == mol or any(path == d or path.is_relative_to(d) for d in owned):
        raise ValueError(f"store {store!r}: must be a folder under data/mol/ that no DVC stage owns (default {LIVE})")
    return path


def run_cycle(repo_root: str, store: str = LIVE) -> dict:
    """One cycle on the live store under ``repo_root``: v0 first if the store is empty, then the next configured cycle."""
    import torch

    from paperworks.core.claims import load_evidence
    from paperworks.core.io import write_text
    from paperworks.core.lm import load_checkpoint, load_tokenizer
    from paperworks.core.params import global_seed, load_section, read_params_file
    from paperworks.core.seeding import derive_seed, seed_everything
    from paperworks.mol import versions as V
    from paperworks.mol import world as W
    from paperworks.mol.artifacts import BASE, WORLD, read_world, seed_dir
    from paperworks.mol.loop import Loop
    from paperworks.mol.models import freeze
    from paperworks.mol.params import Params

    root = Path(repo_root).resolve()
    path = live_store_path(root, store)
    torch.set_num_threads(int(os.environ.get("PAPERWORKS_THREADS", os.cpu_count() or 1)))
    with contextlib.chdir(root):  # params.yaml and the artifact paths are relative to the repository root
        p = load_section("mol", Params)
        g = global_seed(read_params_file())
        seed_everything(derive_seed(g, "mol", "versions"))
        base, cfg, _ = load_checkpoint(BASE)
        freeze(base)
        loop = Loop(p, g, read_world(), load_tokenizer(WORLD / "tokenizer.json"), base, cfg, load_evidence())
        live = V.VersionStore(path)
        started = not live.lineage()
        if started:
            loop.init_store(live, {cap: seed_dir(p.versions.seed) / "adapters" / f"{cap}.safetensors" for cap in W.CAPABILITIES})
        k = 1 + sum(r.get("candidate", "-") != "-" for r in live.lineage())
        if k > len(p.versions.cycles):
            rec = None
        else:
            with tempfile.TemporaryDirectory() as scratch:
                rec = loop.cycle(live, k, Path(scratch))
        serving = live.serving()["version"]
        md = V.lineage_markdown(live.lineage(), serving)
        write_text(path / "lineage.md", md)
    out = {"store": str(path.relative_to(root)), "initialised": started, "serving": serving, "lineage_md": md}
    if rec is None:
        return {**out, "cycle": None, "status": f"nothing to do: all {len(p.versions.cycles)} configured cycles ran"}
    return {**out, "cycle": k, "candidate": rec["candidate"], "status": rec["status"], "version": rec["version"],
            "capability": rec["capability"], "failed_checks": rec["failed_checks"], "reason": rec["reason"]}


def build_cycle_flow(repo_root: str | Path | None = None, retries: int = 1, lock_timeout: float | None = None,
                     dvc_busy_timeout: float = 3600.0):
    """The one-cycle flow bound to one checkout (``repo_root``, default: this file's; never a run parameter)."""
    from prefect import flow, get_run_logger, task
    from prefect.states import Completed, Failed
    from prefect.task_runners import ThreadPoolTaskRunner

    from flows.dvc_cli import DvcError
    from flows.pipeline import is_transient, read_dag, repro_stage, run_stages, stage_threads, stages_to_run, stale_stages
    from flows.project_lock import ProjectLockTimeout, project_lock

    root = Path(repo_root).resolve() if repo_root is not None else REPO_ROOT
    stage_task = repro_stage.with_options(retries=retries, retry_delay_seconds=10, retry_condition_fn=is_transient)
    cycle_task = task(name="mol-cycle")(run_cycle)

    @flow(name=FLOW_NAME, task_runner=ThreadPoolTaskRunner(max_workers=1), log_prints=True)
    def version_cycle(store: str = LIVE, upstream: bool = True):
        """Bring the loop's inputs up to date through DVC (``upstream``), then run one version cycle on ``store``."""
        from prefect.artifacts import create_markdown_artifact

        from paperworks.core.params import ParamsError

        logger = get_run_logger()
        try:
            live_store_path(root, store)
            with project_lock(root, exclusive=False, purpose=f"flow {FLOW_NAME} store={store}", timeout=lock_timeout,
                              on_wait=logger.warning):
                if upstream:
                    dag = read_dag(root)
                    order = upstream_of(dag)
                    to_run = stages_to_run(order, dag, stale_stages(root, dvc_busy_timeout))
                    logger.info("upstream of %s: %s; %d need DVC", LOOP_STAGE, ", ".join(order), len(to_run))
                    with stage_threads(1):
                        states = run_stages(stage_task, to_run, dag, root, dvc_busy_timeout, lanes=1)
                    bad = [s for s in to_run if s not in states or not states[s].is_completed()]
                    if bad:
                        return Failed(message=f"upstream stages failed or did not run: {', '.join(bad)}")
                out = cycle_task(str(root), store)
        except (ParamsError, ValueError, ProjectLockTimeout, DvcError) as e:
            return Failed(message=str(e))
        create_markdown_artifact(key="mol-lineage", markdown=out["lineage_md"], description=f"lineage of {out['store']}")
        logger.info("cycle %s: %s; serving %s", out["cycle"], out["status"], out["serving"])
        return Completed(data={k: v for k, v in out.items() if k != "lineage_md"}, message=f"cycle {out['cycle']}: {out['status']}")

    return version_cycle


def make_deployment(version_cycle, name: str = "scheduled", cron: str | None = None, interval: float | None = None,
                    store: str = LIVE, upstream: bool = True):
    """The scheduled deployment of the one-cycle flow (``prefect.serve`` runs it)."""
    schedule = {"interval": timedelta(seconds=interval)} if interval else {"cron": cron or "0 4 * * *"}
    return version_cycle.to_deployment(name=name, parameters={"store": store, "upstream": upstream}, **schedule)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    when = ap.add_mutually_exclusive_group()
    when.add_argument("--once", action="store_true", help="run one cycle now and exit (no schedule, no server)")
    when.add_argument("--cron", help='cron schedule (default "0 4 * * *")')
    when.add_argument("--interval", type=float, help="seconds between runs instead of a cron")
    ap.add_argument("--name", default="scheduled", help="deployment name")
    ap.add_argument("--store", default=LIVE, help="the live version store, under data/mol/")
    ap.add_argument("--no-upstream", action="store_true", help="skip bringing the loop's inputs up to date through DVC")
    ap.add_argument("--port", type=int, default=4200)
    ap.add_argument("--api-url", help="use this running Prefect server instead of starting one")
    ap.add_argument("--home", default=os.environ["PREFECT_HOME"], help="PREFECT_HOME of the started server (SQLite lives here)")
    args = ap.parse_args(argv)
    if args.once:
        state = build_cycle_flow()(store=args.store, upstream=not args.no_upstream, return_state=True)
        print(state.message, file=sys.stderr if not state.is_completed() else sys.stdout)
        return 0 if state.is_completed() else 1

    from flows.schedule import start_server, stop_server, wait_healthy

    server, api_url = None, args.api_url
    if not api_url:
        api_url = f"http://127.0.0.1:{args.port}/api"
        server = start_server(args.port, Path(args.home).resolve())
    try:
        wait_healthy(api_url)
        os.environ["PREFECT_API_URL"] = api_url  # before prefect builds its settings for the runner
        from prefect import serve

        deployment = make_deployment(build_cycle_flow(), args.name, args.cron, args.interval, args.store, not args.no_upstream)
        print(f"serving '{FLOW_NAME}/{args.name}' on {api_url}; UI at {api_url[:-4]}", flush=True)
        serve(deployment)
    finally:
        if server is not None:
            stop_server(server)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
