#!/bin/sh
# Type-checks the library's sources (mod.ts, python.ts, cuda.ts, io.ts, ffi/, src/) as a Bun or tsc user's
# project sees them: tsconfig.json (Bun's defaults and the strict options), Bun's types and none of
# Deno's, with the TypeScript and @types/bun that tools/integrations/package-lock.json pins
# (tools/npm.sh installs them). Exits 77, saying why, when they cannot be installed.
set -eu
ROOT=$(CDPATH= cd -- "$(dirname -- "$0")/.." && pwd)
if ! MODULES=$("$ROOT/tools/npm.sh"); then
  echo "skipped: the pinned TypeScript could not be installed (tools/npm.sh needs npm and the registry)"
  exit 77
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# The project's tsconfig.json as it is, with the type roots where tools/npm.sh put them (a user's
# project has them in its own node_modules).
cat >"$tmp/tsconfig.json" <<EOF
{ "extends": "$ROOT/tsconfig.json", "compilerOptions": { "typeRoots": ["$MODULES/@types"] } }
EOF
"$MODULES/.bin/tsc" --version
"$MODULES/.bin/tsc" -p "$tmp/tsconfig.json" --listFilesOnly | grep -c "^$ROOT/" | sed 's/$/ files of the checkout/'
"$MODULES/.bin/tsc" -p "$tmp/tsconfig.json"
echo "tsc: no errors"
