"""The entry-point wrapper every stage script uses: clean errors, bounded threads, logging."""
from __future__ import annotations

import functools
import logging
import os
import sys
from typing import Callable

from paperworks.core.io import ArtifactError
from paperworks.core.params import ParamsError

log = logging.getLogger("paperworks")


def stage_main(fn: Callable[[], None]) -> Callable[[], None]:
    """Run ``fn``; turn parameter and artifact errors into one clear message and exit code 2."""

    @functools.wraps(fn)
    def wrapper() -> None:
        logging.basicConfig(level=os.environ.get("PAPERWORKS_LOG", "INFO"), format="%(asctime)s %(name)s %(message)s")
        try:
            import torch

            torch.set_num_threads(int(os.environ.get("PAPERWORKS_THREADS", os.cpu_count() or 1)))
        except ImportError:
            pass
        try:
            fn()
        except (ParamsError, ArtifactError) as e:
            print(f"error: {e}", file=sys.stderr)
            sys.exit(2)

    return wrapper
