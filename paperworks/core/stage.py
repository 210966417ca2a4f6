"""The entry-point wrapper every stage script uses: clean errors, bounded threads, logging, and a
cost record per run (wall and CPU time, peak memory, threads, load) appended to
``logs/stage_costs.jsonl`` — outside every tracked output, so timings never change a hash.
``python -m paperworks.core.costs`` (``make costs``) turns that log into a table.
"""
from __future__ import annotations

import functools
import json
import logging
import os
import resource
import sys
import time
from typing import Callable

from paperworks.core.io import LOGS, ArtifactError
from paperworks.core.params import ParamsError

COST_LOG = LOGS / "stage_costs.jsonl"

log = logging.getLogger("paperworks")


def stage_main(fn: Callable[[], None]) -> Callable[[], None]:
    """Run ``fn``; turn parameter and artifact errors into one clear message and exit code 2."""

    @functools.wraps(fn)
    def wrapper() -> None:
        logging.basicConfig(level=os.environ.get("PAPERWORKS_LOG", "INFO"), format="%(asctime)s %(name)s %(message)s")
        threads = int(os.environ.get("PAPERWORKS_THREADS", os.cpu_count() or 1))
        try:
            import torch

            torch.set_num_threads(threads)
        except ImportError:
            pass
        start = {"wall": time.time(), "perf": time.perf_counter(), "load": os.getloadavg()[0]}
        status = "failed"
        try:
            fn()
            status = "ok"
        except (ParamsError, ArtifactError) as e:
            status = "rejected"
            print(f"error: {e}", file=sys.stderr)
            sys.exit(2)
        finally:
            record_cost(start, threads, status)

    return wrapper


def record_cost(start: dict, threads: int, status: str) -> None:
    """Append this process's cost as one JSON line (never fails the stage: the log is a convenience)."""
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    record = {
        "cmd": " ".join([f"python -m {_module()}", *sys.argv[1:]]), "status": status,
        "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(start["wall"])),
        "wall_s": round(time.perf_counter() - start["perf"], 3),
        "cpu_s": round(me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime, 3),
        "peak_rss_mib": round(max(me.ru_maxrss, kids.ru_maxrss) / 1024, 1),  # ru_maxrss is KiB on Linux
        "threads": threads, "load_at_start": round(start["load"], 2), "load_at_end": round(os.getloadavg()[0], 2),
    }
    try:
        COST_LOG.parent.mkdir(parents=True, exist_ok=True)
        with open(COST_LOG, "a") as fh:  # one short line per write: appends from parallel stages do not interleave
            fh.write(json.dumps(record) + "\n")
    except OSError as e:
        log.warning("could not record stage cost in %s: %s", COST_LOG, e)


def _module() -> str:
    """The ``-m`` module this process runs (how dvc.yaml commands name a stage script)."""
    spec = getattr(sys.modules.get("__main__"), "__spec__", None)
    return spec.name if spec is not None else os.path.basename(sys.argv[0])
