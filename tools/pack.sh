#!/bin/sh
# The npm package: runs the release build (checked against the recorded checksums of this version
# and ffi/checksums.ts), then stages the package with every target's prebuilt library and packs it
# with `npm pack` (tools/pack.ts).
#   tools/pack.sh [--out DIR]   writes DIR/dlpack-ts-<version>.tgz (default: dist/) and prints its path
set -eu
ROOT=$(CDPATH= cd -- "$(dirname -- "$0")/.." && pwd)
"$ROOT/tools/release.sh" --check >&2
exec "$ROOT/.tools/bin/deno" run --allow-read --allow-write --allow-run=npm --allow-env "$ROOT/tools/pack.ts" "$@"
