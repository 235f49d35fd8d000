#!/bin/sh
# Long, coverage-guided fuzzing of the import validator (docs/reliability.md).
#
#   tools/fuzz.sh [seconds] [extra libFuzzer flags...]     default 600 seconds
#
# Builds tests/native/fuzz_validator.zig with Zig's coverage instrumentation (-ffuzz) as a static
# library and links it with clang's libFuzzer. (Zig 0.15.2's own `zig build test --fuzz` crashes
# in its build runner, ziglang/zig#25798.) clang-14 and its libFuzzer runtime come from Debian's
# packages (clang-14, libclang-rt-14-dev); without them it exits 77 saying what to install.
# The corpus is kept in .scratch/fuzz/corpus between runs; a failing input lands in
# .scratch/fuzz/crashes/ and is replayed with: .scratch/fuzz/validator <file>
# For a quick, dependency-free run use the seeded fuzzer instead:
#   (cd zig && zig build fuzz -- --seed random --seconds 600)
set -eu
ROOT=$(CDPATH= cd -- "$(dirname -- "$0")/.." && pwd)
SECONDS_TO_RUN=${1:-600}
[ $# -gt 0 ] && shift
"$ROOT/tools/bootstrap.sh"

CLANG=clang-14
FUZZER_RT=/usr/lib/llvm-14/lib/clang/14.0.6/lib/linux/libclang_rt.fuzzer-x86_64.a
if ! command -v "$CLANG" >/dev/null 2>&1 || [ ! -f "$FUZZER_RT" ]; then
  # Nothing is installed system-wide by the project's scripts: say what is missing and stop.
  echo "fuzz: libFuzzer needs $CLANG and $FUZZER_RT (Debian: apt-get install clang-14 libclang-rt-14-dev)" >&2
  exit 77
fi

cd "$ROOT/zig"
"$ROOT/.tools/bin/zig" build fuzz-lib
OUT="$ROOT/.scratch/fuzz"
mkdir -p "$OUT/corpus" "$OUT/crashes"
"$CLANG" -fsanitize=fuzzer "$ROOT/zig/zig-out/lib/libfuzz_validator.a" -o "$OUT/validator"
echo "fuzz: running libFuzzer for $SECONDS_TO_RUN s (corpus $OUT/corpus)" >&2
exec "$OUT/validator" -max_total_time="$SECONDS_TO_RUN" -artifact_prefix="$OUT/crashes/" -print_final_stats=1 "$@" "$OUT/corpus"
