#!/bin/sh
# The README's first command: installs the pinned toolchains if needed, builds the native
# libraries, and runs the demo in Deno and in Bun.
set -eu
ROOT=$(CDPATH= cd -- "$(dirname -- "$0")/.." && pwd)
"$ROOT/tools/build.sh"
cd "$ROOT"
# numpy for the Python part of the demo; without it the demo says so and runs the rest.
if PY_SITE=$("$ROOT/tools/python.sh" numpy); then
  export PYTHONPATH="$PY_SITE${PYTHONPATH:+:$PYTHONPATH}"
fi
echo "== Deno =="
.tools/bin/deno run --allow-ffi --allow-read --allow-env --allow-run examples/demo.ts
echo
echo "== Bun =="
.tools/bin/bun run examples/demo.ts
