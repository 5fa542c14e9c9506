#!/usr/bin/env bash
# Runs the p2pmpi library's unit tests of datatypes, buffers and reduction operations under
# valgrind's memcheck, one test per valgrind run. These tests drive the library's unsafe code
# that needs no network: packing and unpacking through type maps (contiguous, vector,
# structured with padding, negative offsets, short input), bool data, DynBuffer views and
# their refusals, the native copies given to user reduction operations. (Miri, which would
# check more, cannot be installed here: it needs a nightly toolchain.)
#
#   bench/valgrind.sh [FILTER...]
#
# FILTERs are libtest name filters (a test runs if its name contains one of them); default
# `datatype::` and `collective::ops::`. Builds with `cargo test -p p2pmpi --lib --no-run`
# (CARGO_TARGET_DIR honoured). Prints one line per test and a summary with counts; exits 1 if
# a test fails or memcheck reports an error (invalid read or write, use of uninitialised
# memory in a branch or system call, invalid free). Leaks are not checked: tests leak the
# cached datatypes on purpose. Each test's valgrind output goes to bench/out/valgrind/.
set -uo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
OUT="$ROOT/bench/out/valgrind"
filters=("$@")
[ ${#filters[@]} -gt 0 ] || filters=("datatype::" "collective::ops::")

command -v valgrind >/dev/null || { echo "valgrind is required (apt-get install valgrind)" >&2; exit 2; }
command -v python3 >/dev/null || { echo "python3 is required (to read cargo's JSON output)" >&2; exit 2; }

cd "$ROOT"
export CARGO_BUILD_JOBS="${CARGO_BUILD_JOBS:-1}"
bin=$(cargo test -p p2pmpi --lib --no-run --message-format=json 2>/dev/null | python3 -c '
import json, sys
exe = None
for line in sys.stdin:
    try:
        m = json.loads(line)
    except ValueError:
        continue
    t = m.get("target", {})
    if m.get("reason") == "compiler-artifact" and t.get("name") == "p2pmpi" and "lib" in t.get("kind", []) \
            and m.get("profile", {}).get("test") and m.get("executable"):
        exe = m["executable"]
print(exe or "")
')
if [ -z "$bin" ] || [ ! -x "$bin" ]; then
    echo "could not build the unit tests of p2pmpi (cargo test -p p2pmpi --lib --no-run)" >&2
    exit 2
fi

mapfile -t tests < <("$bin" --list --format terse "${filters[@]}" 2>/dev/null | sed -n 's/: test$//p')
if [ ${#tests[@]} -eq 0 ]; then
    echo "no test matches: ${filters[*]}" >&2
    exit 2
fi

rm -rf "$OUT"
mkdir -p "$OUT"
echo "$(valgrind --version) on ${bin#"$ROOT"/}: ${#tests[@]} tests (${filters[*]})"
clean=0
failed=0
memcheck=0
start=$(date +%s)
for t in "${tests[@]}"; do
    log="$OUT/$t.log"
    # Exit status 99 is memcheck's (errors found); anything else non-zero is the test's.
    valgrind --error-exitcode=99 --leak-check=no --track-origins=yes \
        "$bin" --exact "$t" --test-threads=1 >"$log" 2>&1
    rc=$?
    errors=$(sed -n 's/.*ERROR SUMMARY: \([0-9]*\) errors.*/\1/p' "$log" | tail -n 1)
    if [ "$rc" -eq 0 ]; then
        verdict="ok"
        clean=$((clean + 1))
    elif [ "$rc" -eq 99 ]; then
        verdict="MEMCHECK ERRORS (${errors:-?}), see ${log#"$ROOT"/}"
        memcheck=$((memcheck + 1))
    else
        verdict="FAILED (exit $rc), see ${log#"$ROOT"/}"
        failed=$((failed + 1))
    fi
    printf '%-90s %s\n' "$t" "$verdict"
done
secs=$(($(date +%s) - start))
echo "valgrind: ${#tests[@]} tests, $clean clean, $failed failed, $memcheck with memcheck errors (${secs}s)"
[ "$failed" -eq 0 ] && [ "$memcheck" -eq 0 ]
