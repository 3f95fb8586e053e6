"""Memory-bound kernels against this machine's memory: its copy bandwidth, and a task's bytes moved.

A reshape, a transpose or a broadcast multiply does next to no arithmetic: its GFLOPS say nothing, its GB/s
(``bytes_moved / latency``) beside the rate a plain copy streams at on the same threads say how far it is from
the best it can do. Both count a byte once per buffer it lives in, read or written: a copy of N bytes moves
2N, a kernel its inputs' and outputs' sizes (what a kernel that reads each input once and writes each output
once moves; a broadcast operand re-read from the caches counts once).
"""

from __future__ import annotations

import functools
import logging
import re
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np

log = logging.getLogger("autosched.bandwidth")

COPY_BYTES = 64 << 20  # the copy's source: 2x this machine's 32 MiB L3 (4x with its destination): it streams from DRAM
COPY_REPEATS = 7  # timed copies (the fastest counts) after one untimed one that touches every page


@functools.cache
def last_level_cache_bytes(default: int = 32 << 20) -> int:
    """The largest CPU cache of this machine in bytes (Linux sysfs: cpu0's highest cache level; ``default``
    where it cannot be read: another OS, a container hiding sysfs)."""
    from pathlib import Path

    sizes = []
    for index in Path("/sys/devices/system/cpu/cpu0/cache").glob("index*"):
        try:
            text = (index / "size").read_text().strip()
        except OSError:
            continue
        m = re.fullmatch(r"(\d+)([KMG]?)", text)
        if m:
            sizes.append(int(m.group(1)) << {"": 0, "K": 10, "M": 20, "G": 30}[m.group(2)])
    return max(sizes, default=default)


def dtype_bytes(dtype: str) -> int:
    """Bytes of one element of a TVM dtype ("float32", "bfloat16", "float8_e4m3fn", "bool": 1)."""
    if dtype == "bool":
        return 1
    bits = re.search(r"\d+", dtype)
    if bits is None:
        raise ValueError(f"dtype {dtype!r} has no bit width")
    return max(int(bits.group()) // 8, 1)


def bytes_moved(specs: list[tuple[tuple[int, ...], str]]) -> int:
    """Bytes a kernel moves at least: the sum of its buffer arguments' sizes, inputs and outputs (``arg_specs``)."""
    return sum(int(np.prod(shape, dtype=np.int64)) * dtype_bytes(dtype) for shape, dtype in specs)


def gbps(n_bytes: float, seconds: float) -> float:
    """GB/s of ``n_bytes`` moved in ``seconds`` (nan where there is no latency)."""
    return n_bytes / seconds / 1e9 if 0 < seconds < float("inf") else float("nan")


def timed_copy(src: np.ndarray, dst: np.ndarray, pool: ThreadPoolExecutor, n_threads: int) -> float:
    """Seconds for ``n_threads`` threads to copy their contiguous slices of ``src`` into ``dst`` (numpy's copy
    releases the GIL: the threads copy at once)."""
    bounds = np.linspace(0, src.size, n_threads + 1).astype(np.int64)
    slices = [slice(int(a), int(b)) for a, b in zip(bounds[:-1], bounds[1:], strict=True)]
    start = time.perf_counter()
    list(pool.map(lambda s: np.copyto(dst[s], src[s]), slices))
    return time.perf_counter() - start


@functools.cache
def copy_bandwidth(n_threads: int = 1, n_bytes: int = COPY_BYTES) -> float:
    """Bytes per second (read and written, 2 x ``n_bytes`` a copy) that ``n_threads`` threads copy a buffer well
    above the last-level cache at: the fastest of ``COPY_REPEATS`` copies. Measured once per process and thread
    count (0.15-0.5 s in all here, most of it touching the pages)."""
    src = np.ones(n_bytes // 4, np.float32)
    dst = np.empty_like(src)
    with ThreadPoolExecutor(n_threads) as pool:
        timed_copy(src, dst, pool, n_threads)  # touches every page of dst
        best_s = min(timed_copy(src, dst, pool, n_threads) for _ in range(COPY_REPEATS))
    rate = 2 * src.nbytes / best_s
    log.info("copy bandwidth at %d thread(s): %.1f GB/s (%d MiB copied)", n_threads, rate / 1e9, n_bytes >> 20)
    return rate
