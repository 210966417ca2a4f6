"""The run's progress display: thinned progress bars, the time-left estimate, the progress line."""
from __future__ import annotations

import subprocess
import sys

import pytest

from flows.progress import BarThrottle, clock_text, critical_path_order, estimate_left, progress_line, with_sibling_costs


class FakeClock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def bar(desc: str, n: int, total: int) -> str:
    return f"{desc}:  {100 * n // total}%|###       | {n}/{total} [00:01<00:09, 10.0it/s]"


def test_throttle_keeps_one_bar_line_per_interval_and_the_last() -> None:
    clock = FakeClock()
    throttle = BarThrottle(every_s=30.0, clock=clock)
    assert throttle.keep(bar("train", 1, 100))          # first sight of a bar
    clock.t = 10.0
    assert not throttle.keep(bar("train", 20, 100))     # redrawn within 30 s: dropped
    assert throttle.keep(bar("eval", 1, 10))            # another bar is tracked on its own
    assert throttle.keep("Running stage 'x':")          # ordinary output always kept
    clock.t = 29.9
    assert not throttle.keep(bar("train", 40, 100))
    clock.t = 30.0
    assert throttle.keep(bar("train", 50, 100))         # 30 s after the last shown one
    clock.t = 31.0
    assert throttle.keep(bar("train", 100, 100))        # the final line is always shown
    assert not throttle.keep(bar("train", 100, 100))    # tqdm's repeat of it on close is not
    clock.t = 32.0
    assert throttle.keep(bar("train", 0, 100))          # the same description starting again


def test_throttle_reads_real_tqdm_output_through_a_pipe() -> None:
    # tqdm redraws with "\r"; a text-mode pipe splits those redraws into lines, as the flow reads them
    code = ("from tqdm import tqdm\nimport sys\n"
            "for _ in tqdm(range(500), desc='sft', mininterval=0, miniters=1, file=sys.stdout): pass\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    lines = [x for x in out.splitlines() if x.strip()]
    assert len(lines) > 100  # every redraw is a line of its own
    throttle = BarThrottle(every_s=3600.0)
    kept = [x for x in lines if throttle.keep(x)]
    assert len(kept) == 2, kept
    assert kept[0].startswith("sft:") and "500/500" in kept[-1]


def test_estimate_left_schedules_on_lanes() -> None:
    dag = {"a": [], "b": ["a"], "c": [], "d": ["b", "c"]}
    cost = {"a": 10.0, "b": 20.0, "c": 25.0, "d": 5.0}
    # one lane: everything in sequence
    assert estimate_left(["a", "b", "c", "d"], {}, dag, cost, lanes=1) == (60.0, 0)
    # two lanes: a→b (30 s) beside c (25 s), then d
    assert estimate_left(["a", "b", "c", "d"], {}, dag, cost, lanes=2) == (35.0, 0)
    # a has run 4 s; c is waiting
    assert estimate_left(["b", "c", "d"], {"a": 4.0}, dag, cost, lanes=2) == (31.0, 0)
    # a running past its recorded time counts as about to finish
    assert estimate_left(["b"], {"a": 50.0}, {"a": [], "b": ["a"]}, cost, lanes=2) == (20.0, 0)


def test_estimate_left_counts_stages_without_a_record() -> None:
    dag = {"a": [], "new": ["a"]}
    left, unknown = estimate_left(["a", "new"], {}, dag, {"a": 10.0}, lanes=2)
    assert (left, unknown) == (10.0, 1)
    line = progress_line(0, 2, {}, 0.0, (left, unknown))
    assert "left ≥ 0:10 (1 stage without a recorded cost)" in line
    # no stage left has a record: no bound at all rather than "≥ 0:00"
    assert "left unknown (2 stages without a recorded cost)" in progress_line(0, 2, {}, 0.0, (0.0, 2))


def test_estimate_left_refuses_a_cycle() -> None:
    with pytest.raises(ValueError, match="wait on each other"):
        estimate_left(["a", "b"], {}, {"a": ["b"], "b": ["a"]}, {"a": 1.0, "b": 1.0}, lanes=2)


def test_progress_line() -> None:
    line = progress_line(3, 20, {"selfdistill_grpo@0": 62.0, "selfdistill_grpo@1": 10.0}, 250.0, (750.0, 0))
    assert line == ("3/20 stages done · running selfdistill_grpo@0 (1:02), selfdistill_grpo@1 (0:10) · "
                    "elapsed 4:10 · left ≈ 12:30")
    assert clock_text(3725) == "1:02:05"
    assert progress_line(0, 1, {}, 0.0, None) == "0/1 stages done · elapsed 0:00"


def test_critical_path_order_puts_the_longest_chain_first_and_stays_topological() -> None:
    # world → 3 trainings → evaluate; the 400-s training last in the file
    dag = {"world": [], "train_a": ["world"], "train_b": ["world"], "train_long": ["world"],
           "evaluate": ["train_a", "train_b", "train_long"], "page": []}
    topo = ["world", "train_a", "train_b", "train_long", "evaluate", "page"]
    cost = {"world": 5, "train_a": 100, "train_b": 100, "train_long": 400, "evaluate": 3, "page": 1}
    order = critical_path_order(topo, dag, cost)
    assert order == ["world", "train_long", "train_a", "train_b", "evaluate", "page"]
    # without recorded costs the file's order is kept
    assert critical_path_order(topo, dag, {}) == topo
    # an uncosted stage inherits the chain below it: its upstream still comes first
    assert critical_path_order(["a", "b"], {"a": [], "b": ["a"]}, {"b": 50}) == ["a", "b"]


def test_longest_first_shortens_the_estimated_run_on_two_lanes() -> None:
    dag = {"a": [], "b": [], "c": [], "long": []}
    cost = {"a": 100, "b": 100, "c": 100, "long": 300}
    in_file_order, _ = estimate_left(["a", "b", "c", "long"], {}, dag, cost, lanes=2)
    longest_first, _ = estimate_left(critical_path_order(["a", "b", "c", "long"], dag, cost), {}, dag, cost, lanes=2)
    assert (in_file_order, longest_first) == (400, 300)  # a|b, then c|long  vs  long|a,b,c


def test_a_new_matrix_item_costs_its_recorded_siblings_median() -> None:
    # the seeds grew from 3 to 5: warm@3 and warm@4 have no record, warm@0..2 do
    recorded = {"warm@0": 340.0, "warm@1": 350.0, "warm@2": 360.0, "train@g-0": 40.0, "world": 5.0}
    stages = ["world", "warm@3", "warm@4", "train@g-0", "train@g-3", "evaluate"]
    cost, estimated = with_sibling_costs(stages, recorded)
    assert cost["warm@3"] == cost["warm@4"] == 350.0 and cost["train@g-3"] == 40.0
    assert estimated == {"warm@3", "warm@4", "train@g-3"}
    assert "evaluate" not in cost  # no '@': no siblings to go by, still unknown
    assert cost["warm@0"] == 340.0  # a recorded item keeps its own cost
    assert with_sibling_costs(["a@1", "a@2"], {"a@0": 10.0, "a@9": 20.0})[0]["a@1"] == 15.0  # even count: middle mean


def test_a_new_warm_start_goes_before_cheap_recorded_runs_on_two_lanes() -> None:
    # what the 2026-12-03 protocol_distill run did: the stale recorded 40-s runs went first and the
    # new 350-s warm start (two runs below it) last, so the other lane idled through it
    old_runs = [f"train@{r}-{i}" for r in "gm" for i in range(3)]
    new_runs = ["train@g-3", "train@m-3"]
    topo = [*old_runs, "warm@3", *new_runs]  # the file's order
    dag = {s: [] for s in [*old_runs, "warm@3"]}
    dag.update({s: ["warm@3"] for s in new_runs})
    recorded = {**{s: 40.0 for s in old_runs}, "warm@0": 350.0}
    filled, _ = with_sibling_costs(topo, recorded)
    order = critical_path_order(topo, dag, filled)
    assert order[0] == "warm@3"
    as_before, _ = estimate_left(critical_path_order(topo, dag, recorded), {}, dag, filled, lanes=2)
    now, _ = estimate_left(order, {}, dag, filled, lanes=2)
    assert (as_before, now) == (510.0, 390.0)  # runs 0-120, warm 120-470 alone · warm 0-350 beside the runs
