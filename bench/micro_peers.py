"""The numpy side of bench/micro.ts: numpy's DLPack import and __dlpack__, in thread CPU time,
interleaved batch by batch. Prints one JSON object of medians (ns)."""
import json
import statistics
import sys
import time

import numpy as np

BATCH = 20_000
BATCHES = int(sys.argv[1]) if len(sys.argv) > 1 else 15
a = np.zeros(256, dtype=np.float32)


def export():
    for _ in range(BATCH):
        a.__dlpack__(stream=None, max_version=(1, 0), dl_device=None, copy=None)


def from_dlpack():
    f = np.from_dlpack
    for _ in range(BATCH):
        f(a)


def empty():
    for _ in range(BATCH):
        pass


cases = {"export": export, "from_dlpack": from_dlpack, "loop": empty}
samples = {name: [] for name in cases}
for fn in cases.values():
    fn()
for _ in range(BATCHES):
    for name, fn in cases.items():
        t0 = time.thread_time_ns()
        fn()
        samples[name].append((time.thread_time_ns() - t0) / BATCH)
m = {name: statistics.median(s) for name, s in samples.items()}
# The loop's own cost is left out of both; numpy's import is from_dlpack less the __dlpack__ it calls.
out = {"numpy_export": m["export"] - m["loop"], "numpy_import": m["from_dlpack"] - m["export"]}
print(json.dumps(out))
