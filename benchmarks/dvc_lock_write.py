"""What DVC's dvc.lock rewrite costs per stage, with and without the lock hook (paperworks/dvc_lock_speedup.py).

1. Parses the committed dvc.lock with ruamel's round-trip loader (what DVC uses before every lock write) and with
   the C safe loader (what the hook uses for a comment-free dvc.lock), and dumps both with DVC's dumper: seconds,
   and whether the two dumps are the same bytes.
2. In a fresh clone of this repo (the committed lock, no outputs), times `dvc repro --force --single-item
   params_check` (a stage that runs in well under a second, so the rest is DVC's own work) `--runs` times with the
   hook on and off, interleaved, and checks that both write the same dvc.lock bytes.
Run: `python benchmarks/dvc_lock_write.py [--runs 3]` from the repo root, in the venv `make setup` built.
"""
from __future__ import annotations

import argparse
import hashlib
import io
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def parse_and_dump(lock: Path) -> None:
    import dvc.utils.serialize._yaml as dvc_yaml

    from paperworks.dvc_lock_speedup import lock_aware_parse

    # DVC's own loader, whether or not the hook patched this interpreter
    round_trip = getattr(dvc_yaml.parse_yaml_for_update, "__wrapped__", dvc_yaml.parse_yaml_for_update)
    _dump, parse_yaml = dvc_yaml._dump, dvc_yaml.parse_yaml
    text = lock.read_text()
    rows = []
    for name, parse in (("round-trip loader (DVC)", round_trip), ("C safe loader (hook)", lock_aware_parse(round_trip, parse_yaml))):
        t = time.perf_counter()
        data = parse(text, str(lock))
        t_parse = time.perf_counter() - t
        out = io.StringIO()
        t = time.perf_counter()
        _dump(data, out)
        rows.append((name, t_parse, time.perf_counter() - t, hashlib.sha256(out.getvalue().encode()).hexdigest()[:12]))
    print(f"dvc.lock: {len(text) / 1e6:.2f} MB, {text.count(chr(10))} lines")
    print(f"{'parse before a lock write':28s} {'parse s':>8s} {'dump s':>7s}  dump sha256")
    for name, tp, td, sha in rows:
        print(f"{name:28s} {tp:8.2f} {td:7.2f}  {sha}")
    print(f"same bytes dumped: {rows[0][3] == rows[1][3]}")


def repro_timings(runs: int) -> None:
    dvc = str(Path(sys.executable).with_name("dvc"))
    with tempfile.TemporaryDirectory() as tmp:
        repo = Path(tmp) / "clone"
        subprocess.run(["git", "clone", "-q", str(ROOT), str(repo)], check=True)
        times: dict[str, list[float]] = {"on": [], "off": []}
        locks: dict[str, str] = {}
        for _ in range(runs):
            for mode in ("on", "off"):
                env = dict(os.environ, PAPERWORKS_DVC_LOCK_SPEEDUP="1" if mode == "on" else "0", DVC_NO_ANALYTICS="1",
                           PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")  # the stage's `python`
                t = time.perf_counter()
                subprocess.run([dvc, "repro", "--force", "--single-item", "params_check"], cwd=repo, env=env, check=True,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                times[mode].append(time.perf_counter() - t)
                locks[mode] = hashlib.sha256((repo / "dvc.lock").read_bytes()).hexdigest()[:12]
    print(f"`dvc repro --force --single-item params_check` in a fresh clone, {runs} runs each, interleaved")
    for mode in ("on", "off"):
        print(f"  hook {mode:3s}: median {statistics.median(times[mode]):.2f} s  (runs {', '.join(f'{t:.2f}' for t in times[mode])}), "
              f"dvc.lock sha256 {locks[mode]}")
    print(f"same dvc.lock bytes written: {locks['on'] == locks['off']}")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()
    sys.path.insert(0, str(ROOT))
    print(f"load average {os.getloadavg()[0]:.2f}")
    parse_and_dump(ROOT / "dvc.lock")
    repro_timings(args.runs)
    print(f"load average {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
