#!/bin/sh
# Installs the JS libraries the integration examples and tests use (examples/integrations/), and the
# TypeScript and @types/bun tools/tsc.sh checks the library with:
# tools/integrations/package.json names them at exact versions and its package-lock.json pins every
# dependency with its hash. `npm ci --ignore-scripts` installs exactly that into
# .tools/integrations/ (git-ignored; onnxruntime-node's CPU build ships inside its package, its
# postinstall only fetches optional GPU parts), reused while the lock file matches. Prints the
# node_modules folder to use (DLPACK_NODE_MODULES); the tests skip, saying why, without it.
set -eu
ROOT=$(CDPATH= cd -- "$(dirname -- "$0")/.." && pwd)
SRC="$ROOT/tools/integrations"
DEST="$ROOT/.tools/integrations"
if [ -d "$DEST/node_modules" ] && cmp -s "$SRC/package-lock.json" "$DEST/.installed-lock"; then
  echo "$DEST/node_modules"
  exit 0
fi
command -v npm >/dev/null 2>&1 || { echo "npm.sh: no npm on PATH" >&2; exit 1; }
mkdir -p "$ROOT/.tools"
# Temporary folders of installs that were killed (hours old: another checkout sharing .tools may be
# installing right now).
find "$ROOT/.tools" -mindepth 1 -maxdepth 1 -name '.integrations.*' -mmin +180 -exec rm -rf {} + 2>/dev/null || true
tmp=$(mktemp -d "$ROOT/.tools/.integrations.XXXXXX")
chmod 755 "$tmp"
cp "$SRC/package.json" "$SRC/package-lock.json" "$tmp/"
echo "npm.sh: installing $(tr -d '\n ' <"$SRC/package.json" | sed 's/.*"dependencies":{\([^}]*\)}.*/\1/')" >&2
start=$(date +%s)
if ! (cd "$tmp" && npm ci --ignore-scripts --no-audit --no-fund --loglevel=error) >&2; then
  rm -rf "$tmp"
  echo "npm.sh: npm ci failed" >&2
  exit 1
fi
cp "$SRC/package-lock.json" "$tmp/.installed-lock"
rm -rf "$DEST"
mv "$tmp" "$DEST"
echo "npm.sh: installed in $(( $(date +%s) - start )) s, $(du -sm "$DEST" | cut -f1) MB" >&2
echo "$DEST/node_modules"
