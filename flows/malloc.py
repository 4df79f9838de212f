"""glibc malloc settings for the `mrqa` process and the processes it starts.

The generate, adversarial and report stages allocate and free numpy arrays of a few to a few hundred
MB many thousand times. With glibc's defaults every such array is a fresh mmap that the kernel zeroes
page by page on first touch, and free() hands it straight back: on the 1,000-recipe demo that was
about 10% of the CPU time of an AF dataset, as system time (page faults). `tune_malloc` keeps freed
blocks in the heap for reuse instead (mmap only above 1 GiB, trim the heap only when 1 GiB is free at
its top, grow it 64 MiB at a time). Results do not change (the same content hashes); peak memory
stays the peak of what is live.

The settings go into this process through mallopt and into child processes (the pooled adversary's
and the check's workers, spawned) through glibc's MALLOC_*_ environment variables. A variable the user
already set wins; MRQA_MALLOC=default leaves glibc's own defaults everywhere (MRQA_MALLOC=tuned, or unset:
these settings; any other value is an error, so a typo does not pass unnoticed). Other C libraries (musl,
macOS) are left alone.
"""
from __future__ import annotations

import ctypes
import logging
import os
import sys

log = logging.getLogger(__name__)

OPT_OUT_ENV = "MRQA_MALLOC"
MODES = ("tuned", "default")
# (mallopt parameter number, glibc environment variable, value)
SETTINGS = ((-3, "MALLOC_MMAP_THRESHOLD_", 1 << 30),      # M_MMAP_THRESHOLD: mmap only blocks of 1 GiB and more
            (-1, "MALLOC_TRIM_THRESHOLD_", 1 << 30),      # M_TRIM_THRESHOLD: give memory back past 1 GiB free
            (-2, "MALLOC_TOP_PAD_", 64 << 20))            # M_TOP_PAD: grow the heap 64 MiB at a time


def tune_malloc(environ: dict | None = None) -> dict[str, int]:
    """Apply SETTINGS to this process (where glibc is the C library) and to the environment its
    children inherit; returns {variable: value} of what this call set (empty when it set nothing).
    Raises ValueError when MRQA_MALLOC is set to neither `tuned` nor `default`."""
    env = os.environ if environ is None else environ
    mode = env.get(OPT_OUT_ENV, "").strip().lower() or "tuned"
    if mode not in MODES:
        raise ValueError(f"{OPT_OUT_ENV}={env[OPT_OUT_ENV]!r} is not a malloc mode: use {OPT_OUT_ENV}=tuned "
                         f"(the default: freed large blocks reused) or {OPT_OUT_ENV}=default (glibc's own)")
    if mode == "default" or not sys.platform.startswith("linux"):
        return {}
    try:
        libc = ctypes.CDLL("libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):          # not glibc
        return {}
    applied = {}
    for param, name, value in SETTINGS:
        if name in env:                          # the user's own setting (glibc read it at start)
            continue
        if mallopt(param, value) == 1:
            env[name] = str(value)
            applied[name] = value
        else:
            log.debug("mallopt(%d, %d) refused; glibc's default stays", param, value)
    return applied
