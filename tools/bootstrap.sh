#!/bin/sh
# Installs the pinned toolchains into .tools/ (git-ignored) and prints nothing else when they are
# already there. Deno and Bun come from the npm registry, Zig from PyPI's `ziglang`, so a machine
# with only node/npm and python3/pip can build and test the project.
set -eu

DENO_VERSION=2.9.6
BUN_VERSION=1.4.5
ZIG_VERSION=0.15.2 # also checked in zig/build.zig

ROOT=$(CDPATH= cd -- "$(dirname -- "$0")/.." && pwd)
TOOLS="$ROOT/.tools"
BIN="$TOOLS/bin"
mkdir -p "$BIN"

case "$(uname -s)-$(uname -m)" in
  Linux-x86_64) deno_pkg=@deno/linux-x64-glibc; bun_pkg=@oven/bun-linux-x64 ;;
  Linux-aarch64 | Linux-arm64) deno_pkg=@deno/linux-arm64-glibc; bun_pkg=@oven/bun-linux-aarch64 ;;
  Darwin-x86_64) deno_pkg=@deno/darwin-x64; bun_pkg=@oven/bun-darwin-x64 ;;
  Darwin-arm64) deno_pkg=@deno/darwin-arm64; bun_pkg=@oven/bun-darwin-aarch64 ;;
  *) echo "bootstrap: unsupported platform $(uname -s)-$(uname -m)" >&2; exit 1 ;;
esac

have_version() { # <binary> <version> [version flag]
  [ -x "$1" ] && "$1" "${3:---version}" 2>/dev/null | head -n 1 | grep -qF "$2"
}

if ! have_version "$BIN/deno" "$DENO_VERSION" || ! have_version "$BIN/bun" "$BUN_VERSION"; then
  echo "bootstrap: installing deno@$DENO_VERSION and bun@$BUN_VERSION from the npm registry" >&2
  # --ignore-scripts: the packages' postinstall only moves binaries around; we link them ourselves.
  npm install --prefix "$TOOLS/npm" --no-save --no-package-lock --ignore-scripts --no-audit --no-fund \
    --loglevel=error "deno@$DENO_VERSION" "bun@$BUN_VERSION" >&2
  ln -sf "$TOOLS/npm/node_modules/$deno_pkg/deno" "$BIN/deno"
  ln -sf "$TOOLS/npm/node_modules/$bun_pkg/bin/bun" "$BIN/bun"
  have_version "$BIN/deno" "$DENO_VERSION" || { echo "bootstrap: deno did not install" >&2; exit 1; }
  have_version "$BIN/bun" "$BUN_VERSION" || { echo "bootstrap: bun did not install" >&2; exit 1; }
fi

if ! have_version "$BIN/zig" "$ZIG_VERSION" version; then
  echo "bootstrap: installing ziglang==$ZIG_VERSION from PyPI" >&2
  python3 -m pip install --quiet --disable-pip-version-check --no-warn-script-location \
    --target "$TOOLS/zig" --upgrade "ziglang==$ZIG_VERSION" >&2
  ln -sf "$TOOLS/zig/ziglang/zig" "$BIN/zig"
  have_version "$BIN/zig" "$ZIG_VERSION" version || { echo "bootstrap: zig did not install" >&2; exit 1; }
fi
