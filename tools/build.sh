#!/bin/sh
# Builds libdlpack and the native test/demo producers (zig/zig-out/lib), installing the pinned
# toolchains first when they are missing.
set -eu
ROOT=$(CDPATH= cd -- "$(dirname -- "$0")/.." && pwd)
"$ROOT/tools/bootstrap.sh"
cd "$ROOT/zig"
"$ROOT/.tools/bin/zig" build --release=safe "$@"
