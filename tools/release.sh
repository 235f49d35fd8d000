#!/bin/sh
# The release build: cross-builds libdlpack with Zig for linux x86_64/aarch64 (glibc 2.17),
# macOS x86_64/aarch64 and Windows x86_64 into the git-ignored dist/ as
# libdlpack-<version>-<os>-<arch>.<ext>, writes dist/SHA256SUMS and regenerates ffi/checksums.ts.
# A version's bytes never change once recorded in tools/release-checksums.json (tools/release.ts).
#   tools/release.sh                 build, record a new version, rewrite the table
#   tools/release.sh --check         build and fail if the bytes or the committed table differ (CI)
#   tools/release.sh --bump X.Y.Z    build as X.Y.Z, record it, move every version mention to it
set -eu
ROOT=$(CDPATH= cd -- "$(dirname -- "$0")/.." && pwd)
"$ROOT/tools/bootstrap.sh"
exec "$ROOT/.tools/bin/deno" run --allow-read="$ROOT" \
  --allow-write="$ROOT/dist,$ROOT/ffi/checksums.ts,$ROOT/tools/release-checksums.json,$ROOT/deno.json,$ROOT/package.json,$ROOT/CHANGELOG.md,$ROOT/README.md,$ROOT/docs" \
  --allow-run="$ROOT/.tools/bin/zig" --allow-env=ZIG "$ROOT/tools/release.ts" "$@"
