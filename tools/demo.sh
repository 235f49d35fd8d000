#!/bin/sh
# The README's first command: installs the pinned toolchains if needed, builds the native
# libraries, and runs the demo in Deno and in Bun.
set -eu
ROOT=$(CDPATH= cd -- "$(dirname -- "$0")/.." && pwd)
"$ROOT/tools/build.sh"
cd "$ROOT"
echo "== Deno =="
.tools/bin/deno run --allow-ffi --allow-read --allow-env examples/demo.ts
echo
echo "== Bun =="
.tools/bin/bun run examples/demo.ts
