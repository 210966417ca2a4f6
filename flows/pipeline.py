"""Prefect flow that runs the DVC pipeline.

The DAG is read from ``dvc.yaml`` through DVC's own index (``Repo.index.graph``) —
there is no second list of stages. Each stage runs as one Prefect task that shells
out to ``dvc --wait-for-lock repro --single-item <stage>``, so DVC alone decides what
is up to date and writes ``dvc.lock``; Prefect adds retries, per-stage logs,
concurrency between independent stages, run history and metric artifacts.

Run it locally (Prefect starts a temporary API, no server needed)::

    python -m flows.pipeline                         # the whole DAG
    python -m flows.pipeline --targets 'control_*'   # a track (and what it depends on)
    python -m flows.pipeline --profile smoke -S control.tree.max_depth=5 --experiment depth5
"""
from __future__ import annotations

import argparse
import contextlib
import fnmatch
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml
from prefect import flow, get_run_logger, task

UP_TO_DATE_MARKER = "didn't change, skipping"
RUN_CACHE_MARKER = "is cached - skipping run"


# --------------------------------------------------------------------------- the DAG

def read_dag(repo_root: str | Path = ".") -> dict[str, list[str]]:
    """Stage name → names of the stages it depends on, as DVC resolves ``dvc.yaml``."""
    from dvc.repo import Repo
    from dvc.stage import PipelineStage

    # addressing is relative to the working directory: read the DAG from the repo root
    with contextlib.chdir(repo_root), Repo(".") as repo:
        graph = repo.index.graph  # edges point from a stage to what it depends on
        return {
            stage.addressing: sorted(dep.addressing for dep in graph.successors(stage) if isinstance(dep, PipelineStage))
            for stage in graph.nodes
            if isinstance(stage, PipelineStage)
        }


def select_stages(dag: dict[str, list[str]], targets: list[str] | None) -> list[str]:
    """Stages matching ``targets`` (names or globs) plus everything upstream, in topological order."""
    if targets:
        chosen: set[str] = set()
        for pattern in targets:
            hits = [s for s in dag if fnmatch.fnmatchcase(s, pattern) or s.split("@")[0] == pattern]
            if not hits:
                raise ValueError(f"target '{pattern}' matches no stage (stages: {', '.join(sorted(dag))})")
            chosen.update(hits)
        stack = list(chosen)
        while stack:
            for up in dag[stack.pop()]:
                if up not in chosen:
                    chosen.add(up)
                    stack.append(up)
    else:
        chosen = set(dag)
    order: list[str] = []
    done: set[str] = set()

    def visit(s: str) -> None:
        if s in done:
            return
        done.add(s)
        for up in dag[s]:
            visit(up)
        order.append(s)

    for s in sorted(chosen):
        visit(s)
    return order


def stale_stages(repo_root: Path) -> set[str]:
    """Stages that `dvc status` reports as changed (deps, params, outs, or never run)."""
    proc = subprocess.run([dvc_executable(), "status", "--json"], cwd=repo_root, env=_tool_env(),
                          capture_output=True, text=True, check=True)
    return set(json.loads(proc.stdout or "{}"))


def stages_to_run(order: list[str], dag: dict[str, list[str]], stale: set[str]) -> list[str]:
    """Stale stages plus everything downstream of one: those DVC must look at again.

    A stage that is clean now but sits below a stale one may change once its upstream
    reruns, so it is handed to DVC too; the rest is provably up to date and is skipped
    without spawning a `dvc repro` per stage.
    """
    must: set[str] = set()
    for stage in order:  # topological: upstream decided first
        if stage in stale or any(u in must for u in dag[stage]):
            must.add(stage)
    return [s for s in order if s in must]


# --------------------------------------------------------------------------- params

def set_param(params: dict[str, Any], assignment: str) -> None:
    """Apply one ``key.path=value`` override the way ``dvc exp run -S`` does (value parsed as YAML)."""
    if "=" not in assignment:
        raise ValueError(f"override '{assignment}' must look like key.path=value")
    key, raw = assignment.split("=", 1)
    node = params
    parts = key.strip().split(".")
    for part in parts[:-1]:
        if not isinstance(node.get(part), dict):
            raise ValueError(f"override '{assignment}': '{part}' is not a section of params.yaml")
        node = node[part]
    if parts[-1] not in node:
        raise ValueError(f"override '{assignment}': params.yaml has no key '{key}'")
    node[parts[-1]] = yaml.safe_load(raw)


def apply_params(repo_root: Path, profile: str | None, overrides: list[str]) -> None:
    """Switch profile and apply overrides, then validate every section before any stage runs."""
    from paperworks.core.io import write_text
    from paperworks.core.params import ParamsError, validate_all
    from paperworks.core.profile import compose, render

    params_file = repo_root / "params.yaml"
    params = compose(profile, repo_root / "conf") if profile else yaml.safe_load(params_file.read_text())
    for assignment in overrides:
        set_param(params, assignment)
    write_text(params_file, render(params))
    errors = validate_all(params_file)
    if errors:
        raise ParamsError("\n".join(errors))


# --------------------------------------------------------------------------- tasks

def dvc_executable() -> str:
    local = Path(sys.executable).with_name("dvc")
    return str(local) if local.exists() else "dvc"


def _tool_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env.setdefault("HF_HUB_OFFLINE", "1")
    env.setdefault("TRANSFORMERS_OFFLINE", "1")
    return env


@task(name="dvc-stage", task_run_name="{stage}")
def repro_stage(stage: str, repo_root: str) -> dict[str, str]:
    """One DVC stage. DVC skips it when deps, params and outs are unchanged."""
    logger = get_run_logger()
    cmd = [dvc_executable(), "--wait-for-lock", "repro", "--single-item", stage]
    logger.info("$ %s", " ".join(cmd))
    proc = subprocess.Popen(cmd, cwd=repo_root, env=_tool_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines: list[str] = []
    assert proc.stdout is not None
    for line in proc.stdout:  # stream the stage's own log into Prefect's run log
        line = line.rstrip("\n")
        lines.append(line)
        if line.strip():
            logger.info("%s", line)
    rc = proc.wait()
    if rc != 0:
        raise RuntimeError(f"stage {stage} failed (exit {rc}):\n" + "\n".join(lines[-30:]))
    text = "\n".join(lines)
    status = "up to date" if UP_TO_DATE_MARKER in text else "restored from run cache" if RUN_CACHE_MARKER in text else "ran"
    return {"stage": stage, "status": status}


def make_task_runner(max_parallel: int, dask_address: str | None = None, dask_workers: int | None = None):
    """Threads by default; a Dask cluster (prefect-dask) to spread stages over machines.

    Every Dask worker must see the repository at the same path and share the DVC cache
    (or a DVC remote) — each task runs `dvc repro --single-item` where it lands.
    """
    if dask_address or dask_workers:
        from prefect_dask import DaskTaskRunner

        if dask_address:
            return DaskTaskRunner(address=dask_address)
        return DaskTaskRunner(cluster_kwargs={"n_workers": dask_workers, "threads_per_worker": 1, "processes": True})
    from prefect.task_runners import ThreadPoolTaskRunner

    return ThreadPoolTaskRunner(max_workers=max_parallel)


def publish_metrics(repo_root: Path) -> None:
    """One table artifact per track's metrics file and one markdown summary of all claims."""
    from prefect.artifacts import create_markdown_artifact, create_table_artifact

    from paperworks.core.report import flatten_metrics, results_table

    for path in sorted((repo_root / "metrics").glob("*.json")):
        metrics = json.loads(path.read_text())
        rows = [{"metric": k, "value": v} for k, v in flatten_metrics(metrics).items()]
        create_table_artifact(key=f"metrics-{path.stem.replace('_', '-')}", table=rows, description=f"{path.name}")
    create_markdown_artifact(key="paperworks-claims", markdown=results_table(repo_root / "metrics"), description="headline claims")


# --------------------------------------------------------------------------- the flow

def build_flow(
    max_parallel: int = 2,
    retries: int = 1,
    retry_delay_seconds: float = 10,
    dask_address: str | None = None,
    dask_workers: int | None = None,
):
    stage_task = repro_stage.with_options(retries=retries, retry_delay_seconds=retry_delay_seconds)

    @flow(name="paperworks-pipeline", task_runner=make_task_runner(max_parallel, dask_address, dask_workers), log_prints=True)
    def pipeline(
        targets: list[str] | None = None,
        profile: str | None = None,
        overrides: list[str] | None = None,
        experiment: str | None = None,
        repo_root: str = ".",
    ) -> list[dict[str, str]]:
        """Reproduce the DVC DAG (or ``targets`` and their upstream) stage by stage.

        ``profile``/``overrides`` change params.yaml first (like ``dvc exp run -S``);
        ``experiment`` saves the finished workspace as a DVC experiment of that name.
        """
        logger = get_run_logger()
        root = Path(repo_root).resolve()
        if profile or overrides:
            apply_params(root, profile, list(overrides or []))
        dag = read_dag(root)
        order = select_stages(dag, targets)
        logger.info("%d stages: %s", len(order), ", ".join(order))
        to_run = stages_to_run(order, dag, stale_stages(root))
        logger.info("%d of them need DVC (stale or below a stale stage)", len(to_run))
        futures: dict[str, Any] = {}
        for stage in to_run:
            upstream = [futures[u] for u in dag[stage] if u in futures]
            futures[stage] = stage_task.submit(stage, str(root), wait_for=upstream)
        results = [
            futures[s].result() if s in futures else {"stage": s, "status": "up to date"}  # raises if a stage failed
            for s in order
        ]
        for r in results:
            logger.info("%-40s %s", r["stage"], r["status"])
        publish_metrics(root)
        if experiment:
            subprocess.run([dvc_executable(), "exp", "save", "--force", "-n", experiment], cwd=root, env=_tool_env(), check=True)
            logger.info("saved experiment '%s' (see `dvc exp show`)", experiment)
        return results

    return pipeline


pipeline = build_flow()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--targets", nargs="*", help="stage names or globs (default: every stage)")
    ap.add_argument("--profile", choices=("smoke", "default", "paper"))
    ap.add_argument("-S", "--set", dest="overrides", action="append", default=[], help="key.path=value")
    ap.add_argument("--experiment", help="save the result as a DVC experiment with this name")
    ap.add_argument("--max-parallel", type=int, default=2, help="independent stages run at once")
    ap.add_argument("--retries", type=int, default=1)
    ap.add_argument("--dask-address", help="run stages on this Dask scheduler (tcp://host:8786)")
    ap.add_argument("--dask-workers", type=int, help="start a local Dask cluster with this many worker processes")
    args = ap.parse_args(argv)
    flow_fn = build_flow(max_parallel=args.max_parallel, retries=args.retries,
                         dask_address=args.dask_address, dask_workers=args.dask_workers)
    flow_fn(targets=args.targets, profile=args.profile, overrides=args.overrides, experiment=args.experiment)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
