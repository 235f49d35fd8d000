#!/bin/sh
# Prepares the GPU check for the device machine, HERE (a development machine with the toolchains):
# builds the libraries and packs deno (xz) into .scratch/gpu, then prints the device-tool call that
# runs tests/gpu/device.sh there. Everything carried stays under the 64 MiB the tool allows
# (deno.xz is about 30 MiB, zig/zig-out/lib about 7 MiB).
#
# Then, from the session that holds the device (the device tool sends that session's checkout, so
# run this in it):
#
#   run(command="sh tests/gpu/device.sh", carry=["zig/zig-out", ".scratch/gpu"], timeout_s=300)
#
# and commit what comes back ($OUT: gpu-results.json, gpu-results.md, gpu-check.log) as
# tests/gpu/results/<date>-h200.{json,md}, with the bandwidth and pass/fail per case in docs/cuda.md.
set -eu
ROOT=$(CDPATH= cd -- "$(dirname -- "$0")/../.." && pwd)
cd "$ROOT"
tools/build.sh
mkdir -p .scratch/gpu
if [ ! -f .scratch/gpu/deno.xz ] || [ .tools/bin/deno -nt .scratch/gpu/deno.xz ]; then
  echo "packing deno (xz, about two minutes on two cores)..."
  xz -T0 -6 -c .tools/bin/deno >.scratch/gpu/deno.xz.tmp
  mv .scratch/gpu/deno.xz.tmp .scratch/gpu/deno.xz
fi
# The check loads libdlpack and the test producer from zig/zig-out/lib; the fake driver stays here.
size=$(du -cb .scratch/gpu/deno.xz zig/zig-out/lib/libdlpack.so zig/zig-out/lib/libdlpack_testprod.so | tail -n 1 | cut -f1)
echo "carry size: $((size / 1048576)) MiB (limit 64 MiB, with the tracked files)"
cat <<'CALL'

Device-tool call (from the session holding the device):
  run(command="sh tests/gpu/device.sh", carry=["zig/zig-out", ".scratch/gpu"], timeout_s=300)
Results come back in the call's files: gpu-results.json, gpu-results.md, gpu-check.log.
CALL
