"""The Prefect flow runs the DAG that DVC reads from dvc.yaml; the served schedule fires."""
from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
import yaml

from flows.pipeline import build_flow, read_dag, run_stages, select_stages, set_param
from tests.conftest import REPO, run, tool_env

TOY_DVC_YAML = """
stages:
  a_gen:
    cmd: >-
      python -c "import yaml; p=yaml.safe_load(open('params.yaml')); open('a.txt','w').write(str(p['toy']['n']))"
    params: [toy.n]
    outs: [a.txt]
  b_use:
    matrix:
      k: [1, 2]
    cmd: >-
      python -c "open('b_${item.k}.txt','w').write(open('a.txt').read() * ${item.k})"
    deps: [a.txt]
    outs:
      - b_${item.k}.txt
  c_join:
    cmd: >-
      python -c "import json; json.dump({'claims': [], 'len': len(open('b_1.txt').read() + open('b_2.txt').read())}, open('metrics/toy.json', 'w'))"
    deps: [b_1.txt, b_2.txt]
    metrics:
      - metrics/toy.json:
          cache: false
"""


@pytest.fixture()
def toy_repo(tmp_path: Path) -> Path:
    """A three-stage DVC project (with a matrix) to exercise the orchestration mechanics."""
    (tmp_path / "dvc.yaml").write_text(TOY_DVC_YAML)
    (tmp_path / "params.yaml").write_text("toy:\n  n: 3\n")
    (tmp_path / "metrics").mkdir()
    env = dict(tool_env(), GIT_AUTHOR_NAME="t", GIT_AUTHOR_EMAIL="t@t", GIT_COMMITTER_NAME="t", GIT_COMMITTER_EMAIL="t@t")
    for cmd in (["git", "init", "-q"], [str(Path(sys.executable).with_name("dvc")), "init", "-q"], ["git", "add", "-A"], ["git", "commit", "-qm", "toy"]):
        subprocess.run(cmd, cwd=tmp_path, check=True, env=env)
    return tmp_path


def test_dag_is_read_from_dvc(toy_repo: Path) -> None:
    dag = read_dag(toy_repo)
    assert dag == {"a_gen": [], "b_use@1": ["a_gen"], "b_use@2": ["a_gen"], "c_join": ["b_use@1", "b_use@2"]}
    assert select_stages(dag, ["c_join"]) == ["a_gen", "b_use@1", "b_use@2", "c_join"]
    assert select_stages(dag, ["b_use@2"]) == ["a_gen", "b_use@2"]
    assert select_stages(dag, ["b_use"]) == ["a_gen", "b_use@1", "b_use@2"]
    with pytest.raises(ValueError, match="matches no stage"):
        select_stages(dag, ["nope_*"])


def test_project_dag_matches_dvc_yaml() -> None:
    """Every stage the flow sees is one that dvc.yaml declares (no second list)."""
    declared = yaml.safe_load((REPO / "dvc.yaml").read_text())["stages"] or {}
    dag = read_dag(REPO)
    assert {name.split("@")[0] for name in dag} == set(declared)


def test_only_stale_stages_and_their_downstream_go_to_dvc() -> None:
    from flows.pipeline import stages_to_run

    dag = {"a": [], "b1": ["a"], "b2": ["a"], "c": ["b1", "b2"], "d": []}
    order = ["a", "b1", "b2", "c", "d"]
    assert stages_to_run(order, dag, set()) == []
    assert stages_to_run(order, dag, {"b1"}) == ["b1", "c"]
    assert stages_to_run(order, dag, {"a", "d"}) == order


def test_set_param_names_unknown_keys() -> None:
    params = {"control": {"tree": {"max_depth": 7}}}
    set_param(params, "control.tree.max_depth=5")
    assert params["control"]["tree"]["max_depth"] == 5
    with pytest.raises(ValueError, match="no key 'control.tree.depth'"):
        set_param(params, "control.tree.depth=5")
    with pytest.raises(ValueError, match="key.path=value"):
        set_param(params, "control.tree.max_depth")


def test_flow_runs_stages_through_dvc_then_skips(toy_repo: Path, prefect_api: str) -> None:
    flow = build_flow(max_parallel=2, retries=0, repo_root=toy_repo)
    first = flow()
    assert [r["stage"] for r in first] == ["a_gen", "b_use@1", "b_use@2", "c_join"]
    assert all(r["status"] == "ran" for r in first)
    assert json.loads((toy_repo / "metrics/toy.json").read_text())["len"] == 3  # "3" + "33"
    second = flow()
    assert all(r["status"] == "up to date" for r in second)
    (toy_repo / "params.yaml").write_text("toy:\n  n: 4\n")  # a param change reruns the chain
    third = flow()
    assert [r["status"] for r in third] == ["ran"] * 4
    assert json.loads((toy_repo / "metrics/toy.json").read_text())["len"] == 3
    lock = yaml.safe_load((toy_repo / "dvc.lock").read_text())
    assert set(lock["stages"]) == {"a_gen", "b_use@1", "b_use@2", "c_join"}
    # DVC itself agrees nothing is left to do
    assert "up to date" in run([str(Path(sys.executable).with_name("dvc")), "status"], cwd=toy_repo).stdout


def test_run_reports_progress_with_an_estimate_from_recorded_costs(prefect_api: str) -> None:
    from prefect import flow, task
    from prefect.task_runners import ThreadPoolTaskRunner

    @task
    def fake_stage(stage: str, root: str, busy_timeout: float) -> dict:
        return {"stage": stage, "status": "ran"}

    lines: list[str] = []

    @flow(task_runner=ThreadPoolTaskRunner(max_workers=2))
    def two_lanes() -> dict:
        return run_stages(fake_stage, ["a", "b", "c"], {"a": [], "b": ["a"], "c": ["a"]}, Path("."), 1.0,
                          lanes=2, costs={"a": 10.0, "b": 20.0, "c": 20.0}, report=lines.append)

    states = two_lanes()
    assert set(states) == {"a", "b", "c"} and all(s.is_completed() for s in states.values())
    # a runs first; then b and c side by side: 10 s + 20 s left by the recorded costs
    assert lines[0].startswith("progress: 0/3 stages done · running a (0:00) · elapsed 0:00 · left ≈ 0:30"), lines
    assert lines[-1].startswith("progress: 3/3 stages done · elapsed"), lines
    assert any("running b (" in x and "c (" in x for x in lines), lines


def test_a_free_lane_takes_the_stage_heading_the_longest_recorded_chain(prefect_api: str) -> None:
    from prefect import flow, task
    from prefect.task_runners import ThreadPoolTaskRunner

    started: list[str] = []

    @task
    def fake_stage(stage: str, root: str, busy_timeout: float) -> dict:
        started.append(stage)
        return {"stage": stage, "status": "ran"}

    @flow(task_runner=ThreadPoolTaskRunner(max_workers=1))
    def one_lane() -> dict:
        return run_stages(fake_stage, ["a", "b", "long", "after_a"], {"a": [], "b": [], "long": [], "after_a": ["a"]},
                          Path("."), 1.0, lanes=1, costs={"a": 10.0, "b": 30.0, "long": 60.0, "after_a": 45.0})

    one_lane()
    # chains: a → after_a = 55 s, long = 60 s, b = 30 s
    assert started == ["long", "a", "after_a", "b"]

    # a matrix item without a record of its own (a seed added) costs as its recorded siblings do
    started.clear()

    @flow(task_runner=ThreadPoolTaskRunner(max_workers=1))
    def new_seed() -> dict:
        return run_stages(fake_stage, ["run@0", "run@1", "warm@1"], {"run@0": [], "run@1": [], "warm@1": []},
                          Path("."), 1.0, lanes=1, costs={"run@0": 40.0, "run@1": 40.0, "warm@0": 350.0})

    new_seed()
    assert started == ["warm@1", "run@0", "run@1"]


def test_a_stage_that_measures_time_runs_with_no_other_stage_beside_it(prefect_api: str) -> None:
    import threading
    import time as _time

    from prefect import flow, task
    from prefect.task_runners import ThreadPoolTaskRunner

    events: list[tuple[str, str]] = []
    guard = threading.Lock()

    @task
    def fake_stage(stage: str, root: str, busy_timeout: float) -> dict:
        with guard:
            events.append(("start", stage))
        _time.sleep(0.3)
        with guard:
            events.append(("end", stage))
        return {"stage": stage, "status": "ran"}

    @flow(task_runner=ThreadPoolTaskRunner(max_workers=2))
    def two_lanes() -> dict:
        return run_stages(fake_stage, ["a", "timed", "b", "c"], {"a": [], "timed": [], "b": [], "c": []},
                          Path("."), 1.0, lanes=2, alone={"timed"})

    states = two_lanes()
    assert all(st.is_completed() for st in states.values())
    running: set[str] = set()
    for kind, stage in events:
        if kind == "start":
            assert not running or ("timed" not in running and stage != "timed"), (stage, running, events)
            running.add(stage)
        else:
            running.discard(stage)
    # the other three still share the two lanes
    starts = [s for k, s in events if k == "start"]
    assert max(sum(1 for k, s in events[:i + 1] if k == "start") - sum(1 for k, s in events[:i + 1] if k == "end")
               for i in range(len(events))) == 2, events
    assert sorted(starts) == ["a", "b", "c", "timed"]


def test_runs_alone_is_read_from_the_stage_meta_in_dvc_yaml(toy_repo: Path) -> None:
    from flows.pipeline import stages_that_run_alone

    text = (toy_repo / "dvc.yaml").read_text()
    assert stages_that_run_alone(toy_repo) == set()
    (toy_repo / "dvc.yaml").write_text(text.replace("  a_gen:\n", "  a_gen:\n    meta: {runs_alone: true}\n", 1))
    assert stages_that_run_alone(toy_repo) == {"a_gen"}


def test_flow_stage_failure_fails_the_run(toy_repo: Path, prefect_api: str) -> None:
    (toy_repo / "dvc.yaml").write_text(TOY_DVC_YAML.replace("str(p['toy']['n'])", "str(1/0)"))
    flow = build_flow(max_parallel=2, retries=0, repo_root=toy_repo)
    with pytest.raises(Exception, match="a_gen failed"):
        flow()
    assert not (toy_repo / "b_1.txt").exists()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _completed_runs(api_url: str) -> list[dict]:
    body = json.dumps({"flow_runs": {"state": {"type": {"any_": ["COMPLETED"]}}}}).encode()
    req = urllib.request.Request(f"{api_url}/flow_runs/filter", data=body, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=5) as resp:
        return json.loads(resp.read())


@pytest.mark.integration
def test_served_schedule_fires(toy_repo: Path, tmp_path_factory) -> None:
    """`python -m flows.schedule` starts a real server on loopback and a scheduled run completes."""
    port = _free_port()
    api_url = f"http://127.0.0.1:{port}/api"
    home = tmp_path_factory.mktemp("prefect_home")
    env = dict(tool_env(), PREFECT_HOME=str(home), PREFECT_SERVER_SERVICES_SCHEDULER_LOOP_SECONDS="5", PREFECT_RUNNER_POLL_FREQUENCY="2")
    env.pop("PREFECT_API_URL", None)
    proc = subprocess.Popen(
        [sys.executable, "-m", "flows.schedule", "--interval", "5", "--port", str(port), "--home", str(home),
         "--repo", str(toy_repo), "--targets", "b_use@1"],
        cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 240
        runs: list[dict] = []
        while time.monotonic() < deadline and not runs:
            time.sleep(3)
            assert proc.poll() is None, proc.stdout.read()
            try:
                runs = _completed_runs(api_url)
            except OSError:
                continue
        assert runs, "no scheduled run completed within 240 s"
        assert runs[0]["deployment_id"] is not None  # fired by the schedule, not called by hand
        assert (toy_repo / "b_1.txt").read_text() == "3"
    finally:
        os.killpg(proc.pid, 15)
        proc.wait(timeout=30)


@pytest.mark.integration
def test_flow_on_a_dask_cluster(toy_repo: Path, prefect_api: str) -> None:
    """The scale-out switch: the same flow with stages on Dask worker processes (prefect-dask)."""
    pytest.importorskip("prefect_dask")
    flow = build_flow(retries=0, dask_workers=2, repo_root=toy_repo)
    results = flow()
    assert [r["status"] for r in results] == ["ran"] * 4
    assert json.loads((toy_repo / "metrics/toy.json").read_text())["len"] == 3


@pytest.mark.integration
def test_work_pool_worker_runs_a_deployment(toy_repo: Path, prefect_api: str) -> None:
    """The multi-machine switch: a process work pool, a deployment, a worker that picks the run up.

    The deployment runs the flow code of the checkout it works in: the toy project gets its
    own copy of ``flows/``, as a real checkout would have."""
    shutil.copytree(REPO / "flows", toy_repo / "flows", ignore=shutil.ignore_patterns("__pycache__"))
    api_url = prefect_api
    env = dict(tool_env(), PREFECT_API_URL=api_url)
    prefect = str(Path(sys.executable).with_name("prefect"))
    subprocess.run([prefect, "work-pool", "create", "--type", "process", "toy-pool"], cwd=REPO, env=env, check=True, capture_output=True)
    subprocess.run([sys.executable, "-m", "flows.deploy", "--pool", "toy-pool", "--name", "toy", "--repo", str(toy_repo),
                    "--targets", "a_gen"], cwd=REPO, env=env, check=True, capture_output=True)
    subprocess.run([prefect, "deployment", "run", "paperworks-pipeline/toy"], cwd=REPO, env=env, check=True, capture_output=True)
    worker = subprocess.run([prefect, "worker", "start", "--pool", "toy-pool", "--run-once"], cwd=REPO, env=env,
                            capture_output=True, text=True, timeout=300)
    assert worker.returncode == 0, worker.stdout[-3000:] + worker.stderr[-3000:]
    with urllib.request.urlopen(f"{api_url}/deployments/name/paperworks-pipeline/toy", timeout=5) as resp:
        deployment_id = json.loads(resp.read())["id"]
    runs = [r for r in _completed_runs(api_url) if r["deployment_id"] == deployment_id]  # the session's API holds other tests' runs too
    assert len(runs) == 1
    assert (toy_repo / "a.txt").read_text() == "3"


TWO_TRACKS_DVC_YAML = """
stages:
  x_work:
    cmd: >-
      python -c "import time; t=time.time(); time.sleep(8); open('x.txt','w').write(f'{t} {time.time()}')"
    outs: [x.txt]
  y_work:
    cmd: >-
      python -c "import time; t=time.time(); time.sleep(8); open('y.txt','w').write(f'{t} {time.time()}')"
    outs: [y.txt]
"""


def _stop_output(proc: subprocess.Popen, grace_s: float = 60.0) -> str:
    """The output of a terminated worker; one still shutting down after ``grace_s`` is killed (a loaded
    2-core machine has taken longer than 60 s to stop a Prefect worker after its runs finished)."""
    try:
        return proc.communicate(timeout=grace_s)[0]
    except subprocess.TimeoutExpired:
        proc.kill()
        return proc.communicate()[0]


def test_two_work_pool_workers_run_two_tracks_at_once_in_one_work_tree(toy_repo: Path, prefect_api: str) -> None:
    """Scale-out on a real work pool: two process workers each pick one deployment run (one track
    each) against one work tree, started together. The project lock is shared for runs that change
    no params and DVC's locks order what must be ordered (measured here: DVC's repository lock
    lets the second `dvc repro` start its stage only after the first finished); afterwards
    dvc.lock records both tracks and nothing is stale."""
    (toy_repo / "dvc.yaml").write_text(TWO_TRACKS_DVC_YAML)
    shutil.copytree(REPO / "flows", toy_repo / "flows", ignore=shutil.ignore_patterns("__pycache__"))
    env = dict(tool_env(), PREFECT_API_URL=prefect_api)
    prefect = str(Path(sys.executable).with_name("prefect"))
    subprocess.run([prefect, "work-pool", "create", "--type", "process", "two-pool"], cwd=REPO, env=env, check=True, capture_output=True)
    for track in ("x", "y"):
        subprocess.run([sys.executable, "-m", "flows.deploy", "--pool", "two-pool", "--name", f"track-{track}",
                        "--repo", str(toy_repo), "--targets", f"{track}_*"], cwd=REPO, env=env, check=True, capture_output=True)
        subprocess.run([prefect, "deployment", "run", f"paperworks-pipeline/track-{track}"], cwd=REPO, env=env,
                       check=True, capture_output=True)
    # each worker takes one run at a time (--limit 1) and keeps polling, so the second run goes to
    # the idle worker (with --run-once, a worker that lost the race for the first run just exits)
    # and polls every second, so the idle worker finds the second run while the first still works
    poll = dict(env, PREFECT_WORKER_QUERY_SECONDS="1")
    workers = [subprocess.Popen([prefect, "worker", "start", "--pool", "two-pool", "--limit", "1"], cwd=REPO,
                                env=poll, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) for _ in range(2)]
    lock_file = toy_repo / "dvc.lock"
    try:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            done = lock_file.exists() and {"x_work", "y_work"} <= set(yaml.safe_load(lock_file.read_text())["stages"])
            if done and len(_completed_runs(prefect_api)) >= 2:
                break
            time.sleep(1)
    finally:
        for w in workers:
            w.terminate()
        logs = [_stop_output(w) for w in workers]
    assert (toy_repo / "x.txt").exists() and (toy_repo / "y.txt").exists(), "\n".join(log[-3000:] for log in logs)
    # each worker ran one of the two runs (neither the pool nor the lock funnelled both into one worker)
    submitted = [log.count("Beginning flow run") for log in logs]
    assert submitted == [1, 1], (submitted, "\n".join(log[-2000:] for log in logs))
    lock = yaml.safe_load((toy_repo / "dvc.lock").read_text())["stages"]
    assert {"x_work", "y_work"} <= set(lock)
    status = run([str(Path(sys.executable).with_name("dvc")), "status"], cwd=toy_repo).stdout
    assert "up to date" in status, status
