#!/bin/sh
# Installs the pinned Python packages (tools/python-requirements.txt) into .tools/python/site for
# the python3 on PATH, skipping those already there. With package names as arguments, installs
# only those (the demo needs numpy alone). Prints the site directory on success.
set -eu
ROOT=$(CDPATH= cd -- "$(dirname -- "$0")/.." && pwd)
SITE="$ROOT/.tools/python/site"
REQS="$ROOT/tools/python-requirements.txt"
command -v python3 >/dev/null 2>&1 || { echo "python.sh: no python3 on PATH" >&2; exit 1; }
mkdir -p "$SITE"
missing=""
for spec in $(grep -v '^#' "$REQS" | grep -v '^$'); do
  name=${spec%%==*}
  version=${spec#*==}
  if [ $# -gt 0 ]; then
    wanted=0
    for w in "$@"; do [ "$w" = "$name" ] && wanted=1; done
    [ $wanted -eq 1 ] || continue
  fi
  [ -d "$SITE/$(echo "$name" | tr - _)-$version.dist-info" ] || missing="$missing $spec"
done
if [ -n "$missing" ]; then
  echo "python.sh: installing$missing" >&2
  python3 -m pip install --quiet --disable-pip-version-check --root-user-action=ignore --no-warn-script-location --no-deps \
    --only-binary=:all: --target "$SITE" $missing >&2
fi
echo "$SITE"
