"""The Python side of the benchmark: the same operations in numpy, JAX, pyarrow and torch, timed
with timeit, printed as one JSON object of medians (ns per operation). With --only=bridge, only
what the bridge rows compare with (numpy's round trip, torch)."""
import json
import os
import statistics
import sys
import time
import timeit

import numpy as np

SAMPLES = 7
BRIDGE_ONLY = "--only=bridge" in sys.argv[1:]
out = {"numpy": np.__version__}


def median_ns(stmt, number, setup_globals):
    times = timeit.repeat(stmt, number=number, repeat=SAMPLES, globals=setup_globals)
    return statistics.median(times) / number * 1e9


a = np.zeros(256, dtype=np.float32)
# from_dlpack bound once, as the JS cases bind theirs: a module attribute lookup per call (20-25 ns)
# is Python's call overhead, not numpy's import.
g = {"np": np, "a": a, "from_dlpack": np.from_dlpack}
out["numpy_roundtrip_ns"] = median_ns("from_dlpack(from_dlpack(a))", 100_000, g)


def torch_cases():
    """torch.from_dlpack of a torch tensor in a plain Python process (the bridge rows measure it
    inside the embedded interpreter too), and torch's own __dlpack__."""
    try:
        import torch
    except ImportError as error:
        out["torch"] = "unavailable: %s" % error
        return
    out["torch"] = torch.__version__
    g.update(torch=torch, t=torch.zeros(256))
    median_ns("torch.from_dlpack(t)", 2_000, g)  # first calls import and cache
    out["torch_from_dlpack_ns"] = median_ns("torch.from_dlpack(t)", 20_000, g)
    out["torch_export_ns"] = median_ns("t.__dlpack__(max_version=(1, 0))", 20_000, g)


def rss_bytes():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def io_cases():
    """safetensors' own readers on the 1 GiB file bench/run.ts writes (DLPACK_BENCH_IO_FILE):
    load_file (numpy), and safe_open taking one tensor, timed as bench/io.ts times its loads."""
    path = os.environ.get("DLPACK_BENCH_IO_FILE")
    if not path or not os.path.exists(path):
        out["io"] = "unavailable: DLPACK_BENCH_IO_FILE names no file (bench/run.ts writes it)"
        return
    try:
        from safetensors import safe_open
        from safetensors.numpy import load_file
    except ImportError as error:
        out["io"] = "unavailable: %s" % error
        return
    out["io"] = "measured"
    load_file(path)  # warm-up: the page cache holds the file, as it does for the JS side
    times, growth = [], []
    for _ in range(3):
        before = rss_bytes()
        t0 = time.perf_counter()
        tensors = load_file(path)
        times.append((time.perf_counter() - t0) * 1e3)
        growth.append(rss_bytes() - before)
        del tensors
    out["st_load_file_1GiB_ms"] = statistics.median(times)
    out["st_load_file_1GiB_rss_bytes"] = statistics.median(growth)
    lazy = []
    for _ in range(5):
        t0 = time.perf_counter()
        with safe_open(path, framework="np") as f:
            x = f.get_tensor("layer.255.weight")
            assert x[-1, -1] == 255
        lazy.append((time.perf_counter() - t0) * 1e3)
        del x
    out["st_safe_open_one_ms"] = statistics.median(lazy)


torch_cases()
if BRIDGE_ONLY:
    print(json.dumps(out))
    sys.exit(0)

export = median_ns("a.__dlpack__(stream=None, max_version=(1, 0), dl_device=None, copy=None)", 200_000, g)
out["numpy_export_ns"] = export
# An array made for the export each time, as the fresh-TypedArray row does in JS.
out["numpy_export_fresh_ns"] = median_ns(
    "np.empty(256, np.float32).__dlpack__(stream=None, max_version=(1, 0), dl_device=None, copy=None)", 200_000, g
)
out["numpy_from_dlpack_ns"] = median_ns("from_dlpack(a)", 200_000, g)
# numpy's own import cost: from_dlpack minus the __dlpack__ call it makes.
out["numpy_import_ns"] = out["numpy_from_dlpack_ns"] - export
for label, size in (("1KiB", 1 << 10), ("1MiB", 1 << 20)):
    g["s"] = np.zeros(size // 4, dtype=np.float32)
    out[f"numpy_from_dlpack_{label}_ns"] = median_ns("from_dlpack(s)", 100_000, g)


def copy_cases():
    """The copy rows' peers, as bench/copies.ts times its own: written sources (a never-written
    np.empty reads the kernel's shared zero page, faster than any real array), thread CPU time,
    the cases interleaved sample by sample, medians in GB/s."""
    big = np.arange(4096 * 4096, dtype=np.float32).reshape(4096, 4096)
    dst = np.ones_like(big)
    small = np.full((512, 512), 3, dtype=np.float32)
    small_dst = np.ones_like(small)

    cases = {
        "numpy_memcpy_GBps": (lambda: np.copyto(dst, big), big.nbytes),
        "numpy_copy_into_transposed_GBps": (lambda: np.copyto(dst, big.T), big.nbytes),
        "numpy_alloc_memcpy_GBps": (lambda: big.copy(), big.nbytes),
        "numpy_copy_transposed_GBps": (lambda: np.ascontiguousarray(big.T), big.nbytes),
    }
    samples = {name: [] for name in cases}
    for fn, _ in cases.values():
        fn()
    for _ in range(9):
        for name, (fn, moved) in cases.items():
            t0 = time.thread_time_ns()
            fn()
            samples[name].append(moved / (time.thread_time_ns() - t0))
    for name, values in samples.items():
        out[name] = statistics.median(values)
    # The small copy on its own, as bench/copies.ts times its own.
    small_ns = []
    for _ in range(9):
        t0 = time.thread_time_ns()
        for _ in range(200):
            np.copyto(small_dst, small)
        small_ns.append((time.thread_time_ns() - t0) / 200)
    out["numpy_small_memcpy_GBps"] = small.nbytes / statistics.median(small_ns)


copy_cases()

try:
    import jax
    import jax.numpy as jnp

    aligned = np.zeros(256, dtype=np.float32)
    g.update(jax=jax, x=jnp.zeros(256, dtype=jnp.float32), aligned=aligned)
    out["jax_export_ns"] = median_ns("x.__dlpack__()", 50_000, g)
    out["jax_from_dlpack_ns"] = median_ns("jax.dlpack.from_dlpack(aligned)", 20_000, g)
except ImportError as error:
    out["jax"] = "unavailable: %s" % error

try:
    import pyarrow as pa

    g["arr"] = pa.array(np.zeros(256, dtype=np.float32))
    out["pyarrow_export_ns"] = median_ns("arr.__dlpack__()", 100_000, g)
    out["pyarrow_to_numpy_ns"] = median_ns("from_dlpack(arr)", 100_000, g)
except ImportError as error:
    out["pyarrow"] = "unavailable: %s" % error

io_cases()
print(json.dumps(out))
