#!/bin/sh
# The release build: cross-builds libdlpack with Zig for linux x86_64/aarch64 (glibc 2.17),
# macOS x86_64/aarch64 and Windows x86_64 into the git-ignored dist/ as
# libdlpack-<version>-<os>-<arch>.<ext>, writes dist/SHA256SUMS and regenerates ffi/checksums.ts.
#   tools/release.sh           build and rewrite the table
#   tools/release.sh --check   build and fail if the committed table differs (what CI runs)
set -eu
ROOT=$(CDPATH= cd -- "$(dirname -- "$0")/.." && pwd)
"$ROOT/tools/bootstrap.sh"
exec "$ROOT/.tools/bin/deno" run --allow-read="$ROOT" --allow-write="$ROOT/dist,$ROOT/ffi/checksums.ts" \
  --allow-run="$ROOT/.tools/bin/zig" --allow-env=ZIG "$ROOT/tools/release.ts" "$@"
