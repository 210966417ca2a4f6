"""The README's `make test` (what `.ci/run` calls) on a fresh clone of HEAD with a fresh venv, the whole suite. Prints one
table row and appends it to `benchmarks/results/test_suite.txt`.

    python benchmarks/test_suite.py            # ≈ 17 min on an idle Intel Xeon 2-core machine

Run it on a quiet machine: the suite is CPU-bound, so anything beside it lengthens it. The row has the
install and pytest wall times apart, their CPU (user+sys of every child process), the load average before
and after, and a speed reference for the machine itself: the CPU seconds that the shared smoke copies'
stage runs took (the same stages every run, read from their `logs/stage_costs.jsonl`). Two rows with
different commits compare only when that reference is close; on one machine it moved by 37 % within an
hour on 2026-12-07.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import shutil
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from datetime import datetime, timezone
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "benchmarks" / "results" / "test_suite.txt"
HEADER = ("| date (UTC) | commit | machine | tests | install | pytest | CPU (user+sys) | smoke stage CPU-s (runs) "
          "| load before → after |\n|---|---|---|---|---|---|---|---|---|")


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return f"{line.split(':', 1)[1].strip()}, {os.cpu_count()} cores"
    except OSError:
        pass
    return f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores"


def children_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def timed_make(target: str, cwd: Path, extra: list[str]) -> tuple[float, float, int]:
    """Wall seconds, children's CPU seconds and exit code of `make <target>`."""
    cpu0, t0 = children_cpu_s(), time.perf_counter()
    rc = subprocess.run(["make", target, *extra], cwd=cwd).returncode
    return time.perf_counter() - t0, children_cpu_s() - cpu0, rc


def smoke_stage_cpu(basetemp: Path) -> tuple[float, int]:
    """CPU seconds and count of the stage runs in the workers' shared smoke copies."""
    total, runs = 0.0, 0
    for log in basetemp.glob("popen-gw*/smoke_repo0/logs/stage_costs.jsonl"):
        for line in log.read_text().splitlines():
            total += json.loads(line)["cpu_s"]
            runs += 1
    return total, runs


def junit_counts(path: Path) -> str:
    if not path.is_file():
        return "no report"
    suite = ET.parse(path).getroot()
    suite = suite if suite.tag == "testsuite" else suite.find("testsuite")
    tests, failures, errors, skipped = (int(suite.get(k, 0)) for k in ("tests", "failures", "errors", "skipped"))
    passed = tests - failures - errors - skipped
    return f"{passed} passed" + "".join(f", {n} {what}" for n, what in ((failures, "failed"), (errors, "errors"), (skipped, "skipped")) if n)


def minutes(seconds: float) -> str:
    return f"{int(seconds // 60)} min {seconds % 60:02.0f} s"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--keep", action="store_true", help="keep the clone and pytest's folders (printed)")
    args = ap.parse_args()
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, check=True, capture_output=True, text=True).stdout.strip()
    if subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=REPO, capture_output=True, text=True).stdout.strip():
        print("note: the work tree has uncommitted changes; the clone measures the last commit", file=sys.stderr)
    work = Path(tempfile.mkdtemp(prefix="paperworks-test-suite-"))
    clone, basetemp, junit = work / "repo", work / "pytest", work / "junit.xml"
    subprocess.run(["git", "clone", "-q", str(REPO), str(clone)], check=True)
    started = datetime.now(timezone.utc)
    load_before = os.getloadavg()[0]
    install_s, install_cpu, rc = timed_make("setup", clone, [])
    if rc != 0:
        raise SystemExit(f"make setup failed ({rc}) in {clone}")
    test_s, test_cpu, rc = timed_make("test", clone, [f"PYTEST_ARGS=--basetemp={basetemp} --junitxml={junit}"])
    load_after = os.getloadavg()[0]
    stage_cpu, stage_runs = smoke_stage_cpu(basetemp)
    row = (f"| {started:%Y-%m-%d %H:%M}–{datetime.now(timezone.utc):%H:%M} | {commit} | {cpu_model()} | "
           f"{junit_counts(junit)}{'' if rc == 0 else f' (exit {rc})'} | {minutes(install_s)} | {minutes(test_s)} | "
           f"{(install_cpu + test_cpu) / 60:.1f} CPU-min | {stage_cpu:.0f} ({stage_runs}) | {load_before:.2f} → {load_after:.2f} |")
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    text = RESULTS.read_text() if RESULTS.is_file() else __doc__.split("\n\n")[0] + "\n\n" + HEADER + "\n"
    RESULTS.write_text(text + row + "\n")
    print(HEADER + "\n" + row)
    if args.keep:
        print(f"kept: {work}")
    else:
        shutil.rmtree(work, ignore_errors=True)
    return rc


if __name__ == "__main__":
    raise SystemExit(main())
