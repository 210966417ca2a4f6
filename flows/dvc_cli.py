"""Calling the ``dvc`` command line from the flows: wait for DVC's locks, keep DVC's own words.

DVC has two kinds of lock. The repository lock (``.dvc/tmp/lock``) is waited for by
``--wait-for-lock``; the per-path read/write locks (``.dvc/tmp/rwlock``) are not: a command
that needs a path another ``dvc repro`` is writing fails at once with "'<path>' is busy, it
is being blocked by: (PID …)" (``dvc status`` exits 1, ``dvc repro`` 255) before it changes
anything. :func:`run_dvc` therefore retries such failures with backoff, and when it gives up
(or DVC fails for another reason) raises :class:`DvcError` carrying DVC's own ``ERROR:`` text.
"""
from __future__ import annotations

import json
import logging
import os
import re
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import flows  # noqa: F401  (sets DVC_NO_ANALYTICS and Prefect's environment first)

log = logging.getLogger("paperworks.flows")

# "'<path>' is busy, it is being blocked by:" (rwlock) and "Unable to acquire lock" (repo lock
# after --wait-for-lock gave up): the command did nothing and can be run again.
BUSY_PATTERNS = (re.compile(r"is busy, it is being blocked by"), re.compile(r"Unable to acquire lock"))
STAGE_EXIT = re.compile(r"failed to run: .*?, exited with (-?\d+)", re.S)

# DVC's advice after a successful repro ("git add dvc.lock", "dvc push", autostage): useful
# at a terminal, noise in a task log that runs every stage.
HINT_PREFIXES = (
    "To track the changes with git, run:",
    "git add ",
    "To enable auto staging, run:",
    "dvc config core.autostage true",
    "Use `dvc push` to send your updates to remote storage.",
)


def dvc_executable() -> str:
    local = Path(sys.executable).with_name("dvc")
    return str(local) if local.exists() else "dvc"


def tool_env() -> dict[str, str]:
    """The environment of DVC subprocesses: this venv first on PATH (stages call ``python``), offline."""
    env = dict(os.environ)
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    for key, value in {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "DVC_NO_ANALYTICS": "1"}.items():
        env.setdefault(key, value)
    return env


def is_hint(line: str) -> bool:
    return line.strip().startswith(HINT_PREFIXES)


def error_text(lines: Sequence[str]) -> str:
    """DVC's own error: every line from the first ``ERROR:`` on (DVC continues a message on
    indented lines), without blank lines."""
    for i, line in enumerate(lines):
        if line.startswith("ERROR:"):
            return "\n".join(x for x in lines[i:] if x.strip())
    return ""


def is_busy(text: str) -> bool:
    return any(p.search(text) for p in BUSY_PATTERNS)


class DvcError(RuntimeError):
    """A ``dvc`` command failed; ``message`` is DVC's own ``ERROR:`` text (or its last output)."""

    def __init__(self, args: Sequence[str], returncode: int, message: str, stage_exit: int | None = None,
                 last_output: str = "") -> None:
        self.args_ = list(args)
        self.last_output = last_output  # the last line the command printed before DVC's error
        self.returncode = returncode
        self.message = message
        self.stage_exit = stage_exit  # the stage command's own exit code, when DVC ran one
        super().__init__(f"`dvc {' '.join(args)}` failed (exit {returncode}): {message}")


@dataclass
class DvcResult:
    returncode: int
    lines: list[str]

    @property
    def stdout(self) -> str:
        return "\n".join(self.lines)

    def json(self):
        """The JSON document a ``--json`` command printed. DVC writes warnings to the same stream
        (stderr is merged), e.g. after an interrupted run "Process '…' (Pid …) … had been killed.
        Auto removed it from the lock file." before the document, so it is read from its own line."""
        for line in reversed(self.lines):
            if line.lstrip().startswith(("{", "[")):
                try:
                    return json.loads(line)
                except ValueError:
                    continue
        if not any(x.strip() for x in self.lines):
            return {}
        raise ValueError("no JSON document in DVC's output:\n" + "\n".join(self.lines[-20:]))


def _run_once(cmd: list[str], cwd: Path, on_line: Callable[[str], None] | None) -> DvcResult:
    """Run once, streaming output lines; lines of DVC's ``ERROR:`` block and its hints are not
    streamed (the error is raised once, by the caller, instead of logged twice)."""
    proc = subprocess.Popen(cmd, cwd=cwd, env=tool_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines: list[str] = []
    in_error = False
    assert proc.stdout is not None
    for raw in proc.stdout:
        line = raw.rstrip("\n")
        lines.append(line)
        in_error = in_error or line.startswith("ERROR:")
        if on_line is not None and not in_error and line.strip() and not is_hint(line):
            on_line(line)
    return DvcResult(proc.wait(), lines)


def run_dvc(
    args: Sequence[str],
    cwd: str | Path,
    *,
    on_line: Callable[[str], None] | None = None,
    busy_timeout: float = 3600.0,
    first_delay: float = 1.0,
    max_delay: float = 30.0,
    logger: logging.Logger | logging.LoggerAdapter = log,
) -> DvcResult:
    """``dvc --wait-for-lock <args>`` in ``cwd``; while DVC reports a path busy, wait and retry
    (doubling the delay up to ``max_delay``) for up to ``busy_timeout`` seconds.

    Raises :class:`DvcError` with DVC's message on any other failure, or when the lock is
    still held after ``busy_timeout``.
    """
    cmd = [dvc_executable(), "--wait-for-lock", *args]
    deadline = time.monotonic() + busy_timeout
    delay = first_delay
    while True:
        result = _run_once(cmd, Path(cwd), on_line)
        if result.returncode == 0:
            return result
        message = error_text(result.lines) or "\n".join(x for x in result.lines[-20:] if x.strip())
        if is_busy(message) and time.monotonic() + delay <= deadline:
            logger.warning("DVC is busy, retrying `dvc %s` in %.0f s: %s", " ".join(args), delay, message.splitlines()[0])
            time.sleep(delay)
            delay = min(delay * 2, max_delay)
            continue
        exit_match = STAGE_EXIT.search(message)
        before = [x.strip() for x in result.lines[: next((i for i, x in enumerate(result.lines) if x.startswith("ERROR:")), None)]
                  if x.strip() and not is_hint(x)]
        raise DvcError(list(args), result.returncode, message, int(exit_match.group(1)) if exit_match else None,
                       before[-1] if before else "")
