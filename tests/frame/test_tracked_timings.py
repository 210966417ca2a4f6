"""No CPU or wall time in a committed metrics file, except where a track's claims measure cost.

A timing changes on every rerun, so a file holding one is never the same bytes for the same params and seed:
`dvc metrics diff` shows a change that is not one, and a tracked stage output holding one reruns everything
downstream. Timings belong in the run log (``core.io.write_run_log``) and ``make costs``. The allowed tracks report
compute as a result: hybrid_lm's equal-compute comparisons, video_qa's adaptive-compute cost per question."""
from __future__ import annotations

import json
import re

from tests.conftest import REPO

TIMING_KEY = re.compile(r"(^|_)(cpu|wall|process)_(s|ms|seconds)$")
COST_IS_THE_RESULT = {"hybrid_lm.json", "video_qa.json"}


def timing_keys(obj, path: str = "") -> list[str]:
    found = []
    if isinstance(obj, dict):
        for k, v in obj.items():
            if TIMING_KEY.search(k):
                found.append(f"{path}/{k}")
            found += timing_keys(v, f"{path}/{k}")
    elif isinstance(obj, list):
        for v in obj:
            found += timing_keys(v, f"{path}[]")
    return found


def test_committed_metrics_hold_no_timings_outside_the_cost_tracks():
    bad = {f.name: sorted(set(keys))[:3] for f in sorted((REPO / "metrics").glob("*.json"))
           if f.name not in COST_IS_THE_RESULT and (keys := timing_keys(json.loads(f.read_text())))}
    assert not bad, f"timings in tracked metrics (move them to write_run_log): {bad}"


def test_timing_keys_are_found_at_any_depth():
    assert timing_keys({"a": [{"train_cpu_s": {"0": 1.0}}], "wall_s": 2, "steps": 3, "cpu_ratio": 1.8}) == ["/a[]/train_cpu_s", "/wall_s"]
