"""Prefect flow that runs the DVC pipeline.

The DAG is read from ``dvc.yaml`` through DVC's own index (``Repo.index.graph``) —
there is no second list of stages. Each stage runs as one Prefect task that shells
out to ``dvc --wait-for-lock repro --single-item <stage>``, so DVC alone decides what
is up to date and writes ``dvc.lock``; Prefect adds retries of transient failures,
per-stage logs, concurrency between independent stages, run history and metric artifacts.

The flow works in the checkout its own code lives in (``repo_root`` is fixed when the flow
is built, never a run parameter: whoever may start a run must not choose which ``dvc.yaml``
the server's user executes). It holds the project lock (``flows.project_lock``) for the
whole run: exclusive when it rewrites ``params.yaml`` or saves an experiment, shared otherwise.

Run it locally (Prefect starts a temporary API, no server needed)::

    python -m flows.pipeline                         # the whole DAG
    python -m flows.pipeline --targets 'control_*'   # a track (and what it depends on)
    python -m flows.pipeline --profile smoke -S control.tree.max_depth=5 --targets 'control_*' --experiment depth5
"""
from __future__ import annotations

import argparse
import contextlib
import fnmatch
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import flows  # noqa: F401  (project Prefect home, startup timeout, analytics off: before prefect loads)
from flows.dvc_cli import DvcError, run_dvc
from flows.progress import BarThrottle, critical_path_order, estimate_left, progress_line, with_sibling_costs
from flows.project_lock import ProjectLockTimeout, project_lock

import yaml
from prefect import flow, get_run_logger, task
from prefect.states import Completed, Failed

# The checkout this file belongs to (not ``flows.PROJECT_ROOT``: a deployment loads this file
# by path, and the ``flows`` package it imports may come from elsewhere on sys.path).
REPO_ROOT = Path(__file__).resolve().parents[1]

UP_TO_DATE_MARKER = "didn't change, skipping"
RUN_CACHE_MARKER = "is cached - skipping run"
STAGE_ERROR = "StageError"  # name of the Failed state of a stage command's own error: never retried


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


def stages_that_run_alone(repo_root: str | Path = ".") -> set[str]:
    """Stages whose ``meta: {runs_alone: true}`` in ``dvc.yaml`` says they measure time.

    A stage whose result is a latency or a throughput (decode time per token, queries per second)
    measures the other lane's work too if it runs beside another stage; the flow starts such a
    stage only when no other stage runs and starts nothing beside it. ``dvc repro`` runs one stage
    at a time anyway.
    """
    from dvc.repo import Repo
    from dvc.stage import PipelineStage

    with contextlib.chdir(repo_root), Repo(".") as repo:
        return {
            stage.addressing for stage in repo.index.stages
            if isinstance(stage, PipelineStage) and (stage.meta or {}).get("runs_alone") is True
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


def stale_stages(repo_root: Path, busy_timeout: float = 3600.0) -> set[str]:
    """Stages that `dvc status` reports as changed (deps, params, outs, or never run).

    Waits while another DVC process holds a path (see ``flows.dvc_cli``)."""
    result = run_dvc(["status", "--json"], repo_root, busy_timeout=busy_timeout, logger=_logger())
    return set(result.json())


def _logger():
    from prefect.exceptions import MissingContextError

    try:
        return get_run_logger()
    except MissingContextError:
        from flows.dvc_cli import log

        return log


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
    """Switch profile and apply overrides; validate every section *before* ``params.yaml`` is
    replaced, so a rejected value never stays in the file (and no stage output is touched)."""
    from paperworks.core.io import write_text
    from paperworks.core.params import ParamsError, validate_all
    from paperworks.core.profile import compose, render

    params_file = repo_root / "params.yaml"
    params = compose(profile, repo_root / "conf") if profile else yaml.safe_load(params_file.read_text())
    for assignment in overrides:
        set_param(params, assignment)
    text = render(params)
    scratch = repo_root / ".dvc" / "tmp"
    scratch.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=scratch) as tmp:
        candidate = Path(tmp) / "params.yaml"
        candidate.write_text(text)
        errors = validate_all(candidate)
    if errors:
        raise ParamsError("params.yaml left unchanged; the requested values are invalid:\n" + "\n".join(errors))
    write_text(params_file, text)


# --------------------------------------------------------------------------- tasks

@task(name="dvc-stage", task_run_name="{stage}")
def repro_stage(stage: str, repo_root: str, busy_timeout: float = 3600.0):
    """One DVC stage. DVC skips it when deps, params and outs are unchanged.

    A stage command that ran and exited with an error (the stage wrapper's exit 2 for bad
    params or a bad artifact, or an exception: stages are deterministic, so a rerun fails
    the same way) ends the task as Failed with one message and is never retried. Only a
    stage killed by a signal (OOM killer, preemption) or a DVC failure outside the stage
    command raises, which Prefect retries.
    """
    logger = get_run_logger()
    logger.info("$ dvc --wait-for-lock repro --single-item %s", stage)
    bars = BarThrottle()  # a progress bar read from a pipe is a line per redraw: one every 30 s

    def show(line: str) -> None:
        if bars.keep(line):
            logger.info("%s", line)

    try:
        result = run_dvc(["repro", "--single-item", stage], repo_root, on_line=show, busy_timeout=busy_timeout, logger=logger)
    except DvcError as e:
        said = f": {e.last_output}" if e.last_output else ""
        if e.stage_exit is not None and 0 < e.stage_exit < 128:
            return Failed(name=STAGE_ERROR, message=f"stage {stage} failed, exit {e.stage_exit}, not retried{said}")
        raise RuntimeError(f"stage {stage} failed{said}\n{e.message}") from None
    text = result.stdout
    status = "up to date" if UP_TO_DATE_MARKER in text else "restored from run cache" if RUN_CACHE_MARKER in text else "ran"
    return {"stage": stage, "status": status}


def is_transient(task, task_run, state) -> bool:
    """Prefect's ``retry_condition_fn``: a stage command's own error is final (a rerun fails the same way)."""
    return state.name != STAGE_ERROR


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


@contextlib.contextmanager
def stage_threads(lanes: int, local: bool = True):
    """Torch threads per stage when ``lanes`` stages share this machine: the cores divided among
    them (two lanes on two cores: one thread each, instead of two stages with two threads each
    contending for two cores). A ``PAPERWORKS_THREADS`` set by the user wins; stages on a remote
    Dask cluster keep their workers' own setting."""
    if not local or "PAPERWORKS_THREADS" in os.environ:
        yield
        return
    threads = str(max(1, (os.cpu_count() or 1) // max(1, lanes)))
    added = [k for k in ("PAPERWORKS_THREADS", "OMP_NUM_THREADS") if k not in os.environ]
    os.environ.update(dict.fromkeys(added, threads))
    try:
        yield
    finally:
        for key in added:
            os.environ.pop(key, None)


def publish_metrics(repo_root: Path) -> None:
    """One table artifact per track's metrics file and one markdown summary of all claims."""
    from prefect.artifacts import create_markdown_artifact, create_table_artifact

    from paperworks.core.report import flatten_metrics, results_table

    for path in sorted((repo_root / "metrics").glob("*.json")):
        metrics = json.loads(path.read_text())
        rows = [{"metric": k, "value": v} for k, v in flatten_metrics(metrics).items()]
        create_table_artifact(key=f"metrics-{path.stem.replace('_', '-')}", table=rows, description=f"{path.name}")
    create_markdown_artifact(key="paperworks-claims", markdown=results_table(repo_root / "metrics"), description="headline claims")


def save_experiment(repo_root: Path, name: str, stages: list[str] | None, busy_timeout: float) -> None:
    """``dvc exp save`` of this run. With targets, only the run's stages are cached: a plain
    ``exp save`` commits every stage of ``dvc.lock`` and fails on outputs of tracks this run
    did not touch ("output '…' does not exist")."""
    run_dvc(["exp", "save", "--force", "-n", name, *(stages or [])], repo_root, busy_timeout=busy_timeout, logger=_logger())


# --------------------------------------------------------------------------- the flow

def recorded_costs(root: Path) -> dict[str, float]:
    """Stage → wall seconds of its latest successful run in this work tree (empty if none ran)."""
    from flows.costs import latest_costs, stage_commands
    from paperworks.core.stage import COST_LOG

    log = root / COST_LOG
    if not log.exists():
        return {}
    return {s: c.wall_s for s, c in latest_costs(log.read_text().splitlines(), stage_commands(root)).items()}


def run_stages(stage_task, to_run: list[str], dag: dict[str, list[str]], root: Path, busy_timeout: float,
               lanes: int = 1, costs: dict[str, float] | None = None, report: Any = None,
               alone: set[str] | frozenset[str] = frozenset()) -> dict[str, Any]:
    """Submit each stage once the stages it depends on have completed; return stage → final state.

    Stages below a failed one are never submitted (rather than submitted with ``wait_for`` and
    left by Prefect as "NotReady", an ERROR line each): one failure is reported once. At most
    ``lanes`` stages are submitted at a time (the task runner's workers); a stage in ``alone`` (it
    measures time) starts only when no other stage runs, and nothing starts beside it. After
    every stage, ``report`` (a logging call) gets a progress line: stages done / total, the
    running ones, elapsed time and the time left estimated from ``costs`` on ``lanes``.
    """
    from prefect.futures import as_completed

    wanted = set(to_run)
    # a free lane takes the ready stage heading the longest chain of recorded costs (a new matrix
    # item counts as its recorded siblings' median)
    if costs is not None:
        costs, _ = with_sibling_costs(to_run, costs)
    pick_order = critical_path_order(to_run, dag, costs or {})
    running: dict[Any, str] = {}
    started: dict[str, float] = {}
    states: dict[str, Any] = {}
    blocked: set[str] = set()
    t0 = time.monotonic()

    def show_progress() -> None:
        if report is None:
            return
        now = time.monotonic()
        in_flight = {s: now - started[s] for s in running.values()}
        pending = [s for s in pick_order if s not in states and s not in blocked and s not in in_flight]
        left = estimate_left(pending, in_flight, dag, costs or {}, lanes) if costs is not None else None
        report("progress: " + progress_line(len(states), len(to_run), in_flight, now - t0, left))

    while True:
        for stage in pick_order:
            if stage in states or stage in blocked or stage in running.values():
                continue
            ups = [u for u in dag[stage] if u in wanted]
            if any(u in blocked or (u in states and not states[u].is_completed()) for u in ups):
                blocked.add(stage)
            elif (all(u in states for u in ups) and len(running) < lanes
                  and not (running and (stage in alone or alone.intersection(running.values())))):
                # at most `lanes` stages in flight: a submitted stage is a running one (the progress
                # line and the estimate rely on that), and the next free lane goes to the ready stage
                # first in pick_order rather than to whichever the task runner dequeues
                running[stage_task.submit(stage, str(root), busy_timeout)] = stage
                started[stage] = time.monotonic()
        show_progress()
        if not running:
            return states
        finished = next(as_completed(list(running)))
        finished.wait()
        states[running.pop(finished)] = finished.state


def build_flow(
    max_parallel: int = 2,
    retries: int = 1,
    retry_delay_seconds: float = 10,
    dask_address: str | None = None,
    dask_workers: int | None = None,
    repo_root: str | Path | None = None,
    lock_timeout: float | None = None,
    dvc_busy_timeout: float = 3600.0,
):
    """The pipeline flow bound to one checkout (``repo_root``, default: this file's)."""
    root = Path(repo_root).resolve() if repo_root is not None else REPO_ROOT
    stage_task = repro_stage.with_options(retries=retries, retry_delay_seconds=retry_delay_seconds,
                                          retry_condition_fn=is_transient)

    @flow(name="paperworks-pipeline", task_runner=make_task_runner(max_parallel, dask_address, dask_workers), log_prints=True)
    def pipeline(
        targets: list[str] | None = None,
        profile: str | None = None,
        overrides: list[str] | None = None,
        experiment: str | None = None,
    ):
        """Reproduce the DVC DAG (or ``targets`` and their upstream) stage by stage.

        ``profile``/``overrides`` change params.yaml first (like ``dvc exp run -S``);
        ``experiment`` saves the finished workspace as a DVC experiment of that name.
        """
        from paperworks.core.params import ParamsError

        logger = get_run_logger()
        exclusive = bool(profile or overrides or experiment)
        purpose = f"flow paperworks-pipeline targets={targets} profile={profile} overrides={overrides} experiment={experiment}"
        try:
            with project_lock(root, exclusive=exclusive, purpose=purpose, timeout=lock_timeout, on_wait=logger.warning):
                if profile or overrides:
                    apply_params(root, profile, list(overrides or []))
                dag = read_dag(root)
                order = select_stages(dag, targets)
                logger.info("%d stages: %s", len(order), ", ".join(order))
                to_run = stages_to_run(order, dag, stale_stages(root, dvc_busy_timeout))
                logger.info("%d of them need DVC (stale or below a stale stage)", len(to_run))
                lanes = dask_workers or max_parallel
                with stage_threads(lanes, local=not dask_address):
                    outcome = run_stages(stage_task, to_run, dag, root, dvc_busy_timeout, lanes=lanes,
                                         costs=recorded_costs(root), report=logger.info,
                                         alone=stages_that_run_alone(root))
                results, failures = [], []
                for s in order:
                    state = outcome.get(s)
                    if s not in to_run:
                        results.append({"stage": s, "status": "up to date"})
                    elif state is None:
                        results.append({"stage": s, "status": "not run (upstream failed)"})
                    elif state.is_completed():
                        results.append(state.result())
                    else:
                        results.append({"stage": s, "status": "failed"})
                        failures.append(state.message or f"stage {s} failed")
                for r in results:
                    logger.info("%-40s %s", r["stage"], r["status"])
                if failures:
                    return Failed(message="\n".join(failures))
                publish_metrics(root)
                if experiment:
                    save_experiment(root, experiment, order if targets else None, dvc_busy_timeout)
                    logger.info("saved experiment '%s' (see `dvc exp show`)", experiment)
        except (ParamsError, ValueError, ProjectLockTimeout, DvcError) as e:
            # expected, explained failures: one message, no traceback
            return Failed(message=str(e))
        return Completed(data=results, message=f"{len(to_run)} of {len(order)} stages handed to DVC")

    return pipeline


pipeline = build_flow()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--targets", nargs="*", help="stage names or globs (default: every stage)")
    ap.add_argument("--profile", choices=("smoke", "default", "paper"))
    ap.add_argument("-S", "--set", dest="overrides", action="append", default=[], help="key.path=value")
    ap.add_argument("--experiment", help="save the result as a DVC experiment with this name")
    ap.add_argument("--max-parallel", type=int, default=2, help="independent stages run at once (with --dask-address: stages handed to the cluster at once)")
    ap.add_argument("--retries", type=int, default=1, help="retries of a transient stage failure (a killed stage)")
    ap.add_argument("--lock-timeout", type=float, help="give up after this many seconds if another run holds the project (default: wait)")
    ap.add_argument("--dask-address", help="run stages on this Dask scheduler (tcp://host:8786)")
    ap.add_argument("--dask-workers", type=int, help="start a local Dask cluster with this many worker processes")
    args = ap.parse_args(argv)
    flow_fn = build_flow(max_parallel=args.max_parallel, retries=args.retries, lock_timeout=args.lock_timeout,
                         dask_address=args.dask_address, dask_workers=args.dask_workers)
    state = flow_fn(targets=args.targets, profile=args.profile, overrides=args.overrides, experiment=args.experiment,
                    return_state=True)
    if not state.is_completed():
        print(f"error: {state.message}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
