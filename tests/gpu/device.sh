#!/bin/sh
# The GPU check, ON THE DEVICE MACHINE (python3 with torch, cupy, jax, numpy; no Deno, Bun or Zig;
# no network). Prepared and launched from a development machine by tests/gpu/run.sh, which carries
# zig/zig-out (the built libraries) and .scratch/gpu (deno, xz-compressed).
#
# Unpacks deno into /tmp, finds the driver, runs tests/gpu/check.ts, and leaves gpu-results.json,
# gpu-results.md and gpu-check.log in $OUT (the device tool brings those back).
set -u
ROOT=$(CDPATH= cd -- "$(dirname -- "$0")/../.." && pwd)
cd "$ROOT"
OUT=${OUT:-$ROOT/.scratch/gpu-out}
mkdir -p "$OUT"
export OUT

fail() { echo "device.sh: $*" | tee -a "$OUT/gpu-check.log"; exit 2; }

[ -f zig/zig-out/lib/libdlpack.so ] || fail "zig/zig-out/lib/libdlpack.so was not carried (run tests/gpu/run.sh first)"
[ -f .scratch/gpu/deno.xz ] || fail ".scratch/gpu/deno.xz was not carried (run tests/gpu/run.sh first)"

# xz may be missing there; python3's lzma is not.
DENO=/tmp/dlpack-gpu-deno
python3 - "$DENO" <<'PY' || fail "could not unpack deno"
import lzma, os, shutil, sys
with lzma.open(".scratch/gpu/deno.xz") as src, open(sys.argv[1], "wb") as dst:
    shutil.copyfileobj(src, dst, 1 << 20)
os.chmod(sys.argv[1], 0o755)
PY

# The driver: the loader's libcuda.so.1, else the first one found where NVIDIA mounts it.
if [ -z "${DLPACK_CUDA_LIB:-}" ] && ! ldconfig -p 2>/dev/null | grep -q 'libcuda\.so\.1 '; then
  found=$(find /usr/local/nvidia /usr/lib /usr/lib64 /usr/local/cuda -name 'libcuda.so.1' 2>/dev/null | head -n 1)
  [ -n "$found" ] && export DLPACK_CUDA_LIB="$found"
fi

export GPU_NVIDIA_SMI="$(nvidia-smi --query-gpu=name,driver_version,memory.total,pcie.link.gen.current,pcie.link.gen.max,pcie.link.width.current --format=csv,noheader 2>&1 | head -n 4)"
export DENO_DIR=/tmp/dlpack-gpu-deno-dir DENO_NO_UPDATE_CHECK=1 PYTHONUNBUFFERED=1
# The embedded interpreter should see python3's packages (torch, cupy, jax live in a venv there).
PY_SITES=$(python3 -c 'import site; print(":".join(site.getsitepackages()))' 2>/dev/null || true)
[ -n "$PY_SITES" ] && export PYTHONPATH="$PY_SITES${PYTHONPATH:+:$PYTHONPATH}"
echo "nvidia-smi: $GPU_NVIDIA_SMI" >"$OUT/gpu-check.log"
"$DENO" --version >>"$OUT/gpu-check.log" 2>&1
# Output goes to the log first (it comes back even if the call is cut short), then to stdout.
"$DENO" run --allow-all --no-prompt tests/gpu/check.ts >>"$OUT/gpu-check.log" 2>&1
code=$?
cat "$OUT/gpu-check.log"
# check.ts: 0 all passed, 1 a case failed, 3 no driver (nothing verified).
exit "$code"
