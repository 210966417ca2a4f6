"""Scale-out on a real engine: two tuning workers share one Optuna study on a PostgreSQL server.

The test starts its own PostgreSQL (Debian's package; `.ci/run` installs it when absent) on
loopback in a temporary directory, runs two worker processes through the project's own
`paperworks.insurance.tuning` (`open_study` + `run_study`), and checks that the study as a
whole ran the requested trials once — not once per worker — and that both workers took part.
"""
from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from tests.conftest import REPO, tool_env

WORKER = """
import os, sys, time
from paperworks.insurance.tuning import open_study, run_study

url, name, n_trials, seed = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])

def objective(trial):
    x = trial.suggest_float("x", -3.0, 3.0)
    trial.set_user_attr("worker", os.getpid())
    time.sleep(0.1)  # long enough that the two workers interleave
    return -(x - 1.0) ** 2

study = open_study(name, url, seed=seed, heartbeat_s=5, grace_s=10)
run_study(study, objective, n_trials)
"""


def _postgres_bin() -> Path | None:
    found = shutil.which("initdb")
    if found:
        return Path(found).resolve().parent
    versions = sorted(Path("/usr/lib/postgresql").glob("*/bin/initdb"))
    return versions[-1].parent if versions else None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture()
def postgres_url():
    bindir = _postgres_bin()
    if bindir is None or os.geteuid() != 0:
        if os.environ.get("CI"):
            pytest.fail("PostgreSQL server binaries (initdb) and root are needed in CI: .ci/run installs postgresql")
        pytest.skip("no PostgreSQL server binaries here (apt-get install postgresql), or not root")
    # not under pytest's tmp dirs: they are 0700 root, which the postgres user cannot enter
    root = Path(tempfile.mkdtemp(prefix="paperworks-pg-"))
    data, sock = root / "data", root / "sock"
    sock.mkdir()
    shutil.chown(root, "postgres")
    shutil.chown(sock, "postgres")
    run_as = ["runuser", "-u", "postgres", "--"]
    subprocess.run([*run_as, str(bindir / "initdb"), "-D", str(data), "-A", "trust", "-U", "postgres", "--no-sync"],
                   check=True, capture_output=True)
    port = _free_port()
    subprocess.run([*run_as, str(bindir / "pg_ctl"), "-D", str(data), "-w", "-t", "60", "-l", str(root / "log"),
                    "-o", f"-p {port} -k {sock} -c listen_addresses=127.0.0.1 -c fsync=off", "start"],
                   check=True, capture_output=True)
    try:
        subprocess.run([*run_as, str(bindir / "psql"), "-h", "127.0.0.1", "-p", str(port), "-U", "postgres", "-c",
                        "CREATE DATABASE optuna"], check=True, capture_output=True)
        yield f"postgresql://postgres@127.0.0.1:{port}/optuna"
    finally:
        subprocess.run([*run_as, str(bindir / "pg_ctl"), "-D", str(data), "-m", "fast", "stop"], capture_output=True)
        shutil.rmtree(root, ignore_errors=True)


def test_two_workers_share_one_study_on_postgresql(postgres_url):
    import optuna

    from paperworks.insurance.tuning import FINISHED

    n_trials, name = 12, "insurance-shared-study"
    cmd = [sys.executable, "-c", WORKER, postgres_url, name, str(n_trials)]
    env = tool_env() | {"PYTHONPATH": str(REPO)}
    t0 = time.monotonic()
    workers = [subprocess.Popen([*cmd, str(seed)], cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
               for seed in (1, 2)]
    for w in workers:
        _, err = w.communicate(timeout=300)
        assert w.returncode == 0, err[-3000:]
    study = optuna.load_study(study_name=name, storage=postgres_url)
    finished = [t for t in study.trials if t.state in FINISHED]
    # the study ran its budget once (at most one extra trial in flight when the other worker stopped)
    assert n_trials <= len(finished) <= n_trials + 1, len(finished)
    pids = {t.user_attrs["worker"] for t in finished}
    assert pids == {w.pid for w in workers}, "both workers must have run trials of the one study"
    assert len({t.number for t in study.trials}) == len(study.trials)  # no trial number handed out twice
    assert study.best_value > -1.0, f"best {study.best_value} after {time.monotonic() - t0:.0f} s"
