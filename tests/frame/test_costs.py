"""Stage costs: recorded by the stage wrapper outside tracked outputs, turned into a table."""
from __future__ import annotations

import json
import subprocess
import sys

from flows.costs import critical_path, latest_costs, render, track_of
from tests.conftest import REPO, tool_env

STAGE = """
import sys
from paperworks.core.params import ParamsError
from paperworks.core.stage import stage_main

@stage_main
def main():
    if sys.argv[1] == "bad":
        raise ParamsError("toy.x: must be > 0 (got -1)")
    sum(i * i for i in range(200_000))

main()
"""


def test_every_stage_run_appends_its_cost_outside_tracked_outputs(tmp_path):
    script = tmp_path / "stage_toy.py"
    script.write_text(STAGE)
    env = tool_env() | {"PYTHONPATH": str(REPO), "PAPERWORKS_THREADS": "1"}
    ok = subprocess.run([sys.executable, str(script), "good"], cwd=tmp_path, env=env, capture_output=True, text=True)
    bad = subprocess.run([sys.executable, str(script), "bad"], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert ok.returncode == 0 and bad.returncode == 2 and "toy.x" in bad.stderr
    lines = [json.loads(x) for x in (tmp_path / "logs/stage_costs.jsonl").read_text().splitlines()]
    assert [r["status"] for r in lines] == ["ok", "rejected"]
    good = lines[0]
    assert good["cmd"].endswith("stage_toy.py good") and good["threads"] == 1
    assert good["wall_s"] > 0 and good["cpu_s"] > 0 and good["peak_rss_mib"] > 10
    assert sorted(p.name for p in tmp_path.iterdir()) == ["logs", "stage_toy.py"]  # nothing else written


def test_latest_successful_run_per_stage_and_the_critical_path():
    commands = {"a_data": "python -m stages.a.data", "a_train@0": "python -m stages.a.train --seed 0",
                "a_train@1": "python -m stages.a.train --seed 1", "a_evaluate": "python -m stages.a.evaluate"}
    rec = lambda cmd, wall, status="ok": json.dumps({"cmd": cmd, "status": status, "wall_s": wall, "cpu_s": wall,  # noqa: E731
                                                     "peak_rss_mib": 100, "threads": 1, "load_at_start": 0.5,
                                                     "started": "2026-11-30T00:00:00Z"})
    lines = [rec("python -m stages.a.data", 10), rec("python -m stages.a.train  --seed 0", 50),
             rec("python -m stages.a.train --seed 1", 70), rec("python -m stages.a.train --seed 1", 99, "failed"),
             rec("python -m stages.a.evaluate", 5), "{truncated", rec("python -m stages.a.data", 12)]
    costs = latest_costs(lines, commands)
    assert costs["a_data"].wall_s == 12 and costs["a_train@1"].wall_s == 70  # latest ok run; failed and torn lines skipped
    dag = {"a_data": [], "a_train@0": ["a_data"], "a_train@1": ["a_data"], "a_evaluate": ["a_train@0", "a_train@1"]}
    total, path = critical_path(dag, {s: c.wall_s for s, c in costs.items()})
    assert total == 12 + 70 + 5 and path == ["a_data", "a_train@1", "a_evaluate"]
    table = render(costs, dag, cores=2, tracks=["a"])
    assert "| a_train@1 | 70.0 |" in table and "critical path 1.4 min" in table
    assert track_of("person_search_embed_text", ["person_search", "person"]) == "person_search"
    assert track_of("params_check", ["a"]) == "frame"
