#!/bin/sh
# Installs the pinned Python packages for the python3 on PATH, all of them under .tools/python/:
# - the base set (tools/python-requirements.txt: numpy, JAX, pyarrow) into .tools/python/site,
#   package by package, skipping those already there;
# - each peer framework (tools/python-peers/<peer>.txt, every dependency pinned) into a directory of
#   its own, .tools/python/peers/<peer>: installed whole into a temporary directory, moved into place
#   when pip succeeded, and reused while its list of pins matches the file. A peer whose install fails
#   does not fail the script: .tools/python/peers/<peer>.failed keeps pip's last lines, and the tests
#   skip that peer with them as the reason.
# With arguments (base package names and/or peer names), installs only those (the demo needs numpy
# alone). Prints the PYTHONPATH to use: the base site, then each installed peer directory.
set -eu
ROOT=$(CDPATH= cd -- "$(dirname -- "$0")/.." && pwd)
SITE="$ROOT/.tools/python/site"
PEERS="$ROOT/.tools/python/peers"
REQS="$ROOT/tools/python-requirements.txt"
command -v python3 >/dev/null 2>&1 || { echo "python.sh: no python3 on PATH" >&2; exit 1; }
mkdir -p "$SITE" "$PEERS"
# Temporary directories of installs that were killed (hours old: another checkout sharing .tools may
# be installing right now).
find "$PEERS" -mindepth 1 -maxdepth 1 -name '.*' -mmin +180 -exec rm -rf {} + 2>/dev/null || true

pins() { grep -v '^#' "$1" | grep -v '^$'; }
wanted() { # <name>: whether the arguments ask for it (no arguments ask for everything)
  [ $ARGC -eq 0 ] && return 0
  for w in $ARGS; do [ "$w" = "$1" ] && return 0; done
  return 1
}
pip_install() { # <target> <spec...>
  target=$1; shift
  python3 -m pip install --quiet --disable-pip-version-check --root-user-action=ignore --no-warn-script-location \
    --no-deps --only-binary=:all: --target "$target" "$@"
}
ARGC=$#
ARGS="$*"

missing=""
for spec in $(pins "$REQS"); do
  name=${spec%%==*}
  version=${spec#*==}
  wanted "$name" || continue
  [ -d "$SITE/$(echo "$name" | tr - _)-$version.dist-info" ] || missing="$missing $spec"
done
if [ -n "$missing" ]; then
  echo "python.sh: installing$missing" >&2
  # shellcheck disable=SC2086
  pip_install "$SITE" $missing >&2
fi
path="$SITE"

for file in "$ROOT"/tools/python-peers/*.txt; do
  peer=$(basename "$file" .txt)
  wanted "$peer" || continue
  dir="$PEERS/$peer"
  want=$(pins "$file")
  if [ -d "$dir" ] && [ "$(cat "$dir/.pins" 2>/dev/null || true)" = "$want" ]; then
    path="$path:$dir"
    continue
  fi
  echo "python.sh: installing peer $peer ($(echo "$want" | wc -l) packages)" >&2
  start=$(date +%s)
  tmp=$(mktemp -d "$PEERS/.$peer.XXXXXX")
  chmod 755 "$tmp" # mktemp makes it private; the installed peer is read by whoever runs the tests
  # shellcheck disable=SC2086
  if pip_install "$tmp" $want >"$tmp.log" 2>&1; then
    echo "$want" >"$tmp/.pins"
    rm -rf "$dir" "$PEERS/$peer.failed"
    mv "$tmp" "$dir"
    path="$path:$dir"
    echo "python.sh: peer $peer installed in $(( $(date +%s) - start )) s, $(du -sm "$dir" | cut -f1) MB" >&2
  else
    { echo "pip install of tools/python-peers/$peer.txt failed:"; tail -n 5 "$tmp.log"; } >"$PEERS/$peer.failed"
    rm -rf "$tmp"
    echo "python.sh: peer $peer could not be installed (its tests will skip):" >&2
    tail -n 5 "$tmp.log" >&2
  fi
  rm -f "$tmp.log"
done
echo "$path"
