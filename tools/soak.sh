#!/bin/sh
# The soak (docs/reliability.md): mixed import / export / chain /
# array-interface / native-thread traffic with RSS sampled every second; fails unless RSS stays
# flat after the warm-up and every counter returns to zero.
#
#   tools/soak.sh [seconds] [deno|bun|both]        default: 600 seconds, both runtimes
#
# SOAK_MAX_DRIFT_MB (default 16) sets the RSS limit; SOAK_EXTRA=path/to/module.ts adds the
# `workloads` that module exports (see tests/soak/workloads.ts); SOAK_EXTRA=tests/soak/python_workloads.ts
# adds numpy <-> JS traffic through the embedded Python (the pinned numpy is installed for it).
set -eu
ROOT=$(CDPATH= cd -- "$(dirname -- "$0")/.." && pwd)
SECONDS_TO_RUN=${1:-600}
WHICH=${2:-both}
"$ROOT/tools/build.sh" >/dev/null
cd "$ROOT"
if PY_SITE=$("$ROOT/tools/python.sh" numpy); then export PYTHONPATH="$PY_SITE${PYTHONPATH:+:$PYTHONPATH}"; fi
export SOAK_SECONDS="$SECONDS_TO_RUN"
status=0
if [ "$WHICH" = deno ] || [ "$WHICH" = both ]; then
  echo "soak: deno, $SECONDS_TO_RUN s" >&2
  .tools/bin/deno run --allow-ffi --allow-read --allow-env --allow-run --v8-flags=--expose-gc tests/soak/soak.ts || status=1
fi
if [ "$WHICH" = bun ] || [ "$WHICH" = both ]; then
  echo "soak: bun, $SECONDS_TO_RUN s" >&2
  .tools/bin/bun run tests/soak/soak.ts || status=1
fi
exit $status
