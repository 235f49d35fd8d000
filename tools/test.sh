#!/bin/sh
# The README's second command: installs the pinned toolchains if needed, builds, then runs the Zig
# unit tests, the release cross-build, the static checks, and the same TS test files under
# `deno test` and `bun test`.
# Ends with one summary line: "N passed, N failed, N skipped".
set -u
ROOT=$(CDPATH= cd -- "$(dirname -- "$0")/.." && pwd)
cd "$ROOT"
"$ROOT/tools/build.sh" || { echo "0 passed, 1 failed, 0 skipped"; exit 1; }
export PATH="$ROOT/.tools/bin:$PATH"
LOG="$ROOT/.scratch/test-logs"
mkdir -p "$LOG"
# The Python interop tests use the pinned numpy/JAX/pyarrow and the peers (docs/python.md); without them they skip, saying why.
if PY_SITE=$("$ROOT/tools/python.sh"); then
  export PYTHONPATH="$PY_SITE${PYTHONPATH:+:$PYTHONPATH}"
else
  echo "test.sh: the pinned Python packages could not be installed; Python tests will be skipped" >&2
fi

# The JS libraries of examples/integrations/ (ONNX Runtime, Apache Arrow, ndarray) at the versions
# tools/integrations/package-lock.json pins; without them those tests skip, saying why.
if NODE_MODULES=$("$ROOT/tools/npm.sh"); then
  export DLPACK_NODE_MODULES="$NODE_MODULES"
else
  echo "test.sh: the pinned npm packages could not be installed; the integration tests will be skipped" >&2
fi

failed_suites=""
passed_checks=0
skipped_checks=0
step() { # <name> <command...>: runs a step, records its exit status (77: skipped, with its reason)
  name=$1; shift
  echo
  echo "== $name =="
  start=$(date +%s)
  ( "$@" ) >"$LOG/$name.log" 2>&1
  code=$?
  cat "$LOG/$name.log"
  echo "($name: $(( $(date +%s) - start )) s)"
  if [ $code -eq 77 ]; then skipped_checks=$((skipped_checks + 1))
  elif [ $code -ne 0 ]; then failed_suites="$failed_suites $name"
  fi
  return 0
}
check() { # <name> <command...>: a step that is one check of its own (counted as passed when it exits 0)
  step "$@"
  case " $failed_suites " in
    *" $1 "*) ;;
    *) grep -q '^skipped:' "$LOG/$1.log" || passed_checks=$((passed_checks + 1)) ;;
  esac
}

step zig-test sh -c 'cd zig && zig build test --summary all'
# Style and ABI checks: zig fmt, 100 columns, 70-line functions, snake_case constants and no import
# cycle (zig/tools/tidy.zig); src/facts/abi.ts as `zig build abi` writes it from the Zig declarations.
check zig-tidy sh -c 'cd zig && zig build tidy'
check zig-abi sh -c 'cd zig && zig build abi-check'
# Reliability (docs/reliability.md): the seeded validator fuzzer, releases from
# 8 threads, and valgrind memcheck over the unit tests, a fuzz run and the thread stress test.
check zig-fuzz sh -c 'cd zig && zig build fuzz -- --seed 1 --cases 1000000'
check zig-threads sh -c 'cd zig && zig build threads -- --releases 1000000 --threads 8'
check zig-valgrind sh -c '
  if ! command -v valgrind >/dev/null 2>&1; then
    echo "skipped: valgrind is not installed (Debian: apt-get install valgrind); nothing is installed system-wide here"
    exit 77
  fi
  valgrind --version && cd zig && zig build valgrind --summary all'
# Cross-builds every release target into dist/ (the URL, release and single-binary tests use it) and
# fails when the committed ffi/checksums.ts no longer matches those bytes.
step release tools/release.sh --check
# The static checks are the `check:*` tasks of deno.json (`deno task check` runs them all), one step
# each. examples/bun/ holds Bun-only entries (`type: "file"` imports Deno cannot resolve).
for task in $(deno eval 'const t = JSON.parse(Deno.readTextFileSync("deno.json")).tasks;
  console.log(Object.keys(t).filter((k) => k.startsWith("check:")).map((k) => k.slice(6)).join(" "))'); do
  step "deno-$task" deno task --quiet "check:$task"
done
rm -f "$LOG/deno-test.xml" "$LOG/bun-test.xml"
step deno-test deno test --allow-ffi --allow-read --allow-write --allow-env --allow-run --allow-net=127.0.0.1 \
  --v8-flags=--expose-gc --junit-path="$LOG/deno-test.xml" tests/
step bun-test bun test --reporter=junit --reporter-outfile="$LOG/bun-test.xml" ./tests

# The interop matrix of this run (docs/python.md's table comes from `deno task matrix`).
deno run --allow-read tools/matrix.ts --print > "$LOG/matrix.md" 2>&1 || true

# Counts: Zig's "N/M tests passed"; both TS runners' JUnit reports (tools/junit.ts).
zig_passed=$(grep -o '[0-9]*/[0-9]* tests passed' "$LOG/zig-test.log" | tail -n 1 | cut -d/ -f1)
zig_total=$(grep -o '[0-9]*/[0-9]* tests passed' "$LOG/zig-test.log" | tail -n 1 | cut -d/ -f2 | cut -d' ' -f1)
# Zig counts skipped tests in the total ("71/72 tests passed; 1 skipped"): they are skips, not failures.
zig_skipped=$(grep -o 'tests passed; [0-9]* skipped' "$LOG/zig-test.log" | tail -n 1 | grep -o '[0-9]*')
set -- $(deno run --allow-read tools/junit.ts "$LOG/deno-test.xml")
deno_passed=$1 deno_failed=$2 deno_skipped=$3
set -- $(deno run --allow-read tools/junit.ts "$LOG/bun-test.xml")
bun_passed=$1 bun_failed=$2 bun_skipped=$3

n() { echo "${1:-0}"; }
passed=$(( $(n "$zig_passed") + $(n "$deno_passed") + $(n "$bun_passed") + passed_checks ))
failed=$(( $(n "$zig_total") - $(n "$zig_passed") - $(n "$zig_skipped") + $(n "$deno_failed") + $(n "$bun_failed") ))
skipped=$(( $(n "$zig_skipped") + $(n "$deno_skipped") + $(n "$bun_skipped") + skipped_checks ))
# A step that failed without failing a counted test (a check, a crash) still counts as a failure.
for s in $failed_suites; do
  case $s in
    zig-test) [ "$(n "$zig_total")" -gt "$(( $(n "$zig_passed") + $(n "$zig_skipped") ))" ] || failed=$((failed + 1)) ;;
    deno-test) [ "$(n "$deno_failed")" -gt 0 ] || failed=$((failed + 1)) ;;
    bun-test) [ "$(n "$bun_failed")" -gt 0 ] || failed=$((failed + 1)) ;;
    *) failed=$((failed + 1)) ;;
  esac
done

echo
echo "== summary =="
echo "zig: $(n "$zig_passed")/$(n "$zig_total") passed, $(n "$zig_skipped") skipped; native reliability checks: $passed_checks passed, $skipped_checks skipped; deno: $(n "$deno_passed") passed, $(n "$deno_failed") failed, $(n "$deno_skipped") skipped; bun: $(n "$bun_passed") passed, $(n "$bun_failed") failed, $(n "$bun_skipped") skipped"
[ -z "$failed_suites" ] || echo "failed steps:$failed_suites"
for runner in deno bun; do
  failures=$(deno run --allow-read tools/junit.ts --failures "$LOG/$runner-test.xml")
  [ -z "$failures" ] || printf 'failed %s tests:\n%s\n' "$runner" "$failures"
done
echo "$passed passed, $failed failed, $skipped skipped"
[ -z "$failed_suites" ]
