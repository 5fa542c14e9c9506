#!/usr/bin/env bash
# Builds and runs every fuzz target for SECONDS each (default 60), one at a time, on one core,
# without a sanitizer (works on the stable toolchain), then prints one line per target with the
# number of inputs executed. Needs cargo-fuzz (`cargo install cargo-fuzz --locked`).
#
#   fuzz/run.sh [SECONDS] [TARGET...]
#
# Crashing inputs land in fuzz/artifacts/TARGET/; the growing corpus in fuzz/corpus/TARGET/
# (both ignored by git). Minimized inputs worth keeping go to fuzz/regressions/TARGET/, which
# are replayed first (as extra corpus).
set -u
secs="${1:-60}"
shift || true
cd "$(dirname "$0")"
export CARGO_BUILD_JOBS="${CARGO_BUILD_JOBS:-1}"
if [ "$#" -gt 0 ]; then
    targets=("$@")
else
    mapfile -t targets < <(cargo fuzz list)
fi
cargo fuzz build -s none || exit 1
mkdir -p logs
status=0
summary=()
for t in "${targets[@]}"; do
    mkdir -p "corpus/$t"
    extra=()
    [ -d "regressions/$t" ] && extra=("regressions/$t")
    log="logs/$t.log"
    cargo fuzz run -s none "$t" "corpus/$t" "${extra[@]}" -- \
        -max_total_time="$secs" -jobs=1 -workers=1 -print_final_stats=1 >"$log" 2>&1
    rc=$?
    # With -jobs, libFuzzer may also write the worker's output to fuzz-0.log.
    if [ -f fuzz-0.log ]; then cat fuzz-0.log >>"$log"; rm -f fuzz-0.log; fi
    execs=$(sed -n 's/^stat::number_of_executed_units: *\([0-9]*\).*/\1/p' "$log" | tail -n 1)
    if [ -z "$execs" ]; then
        execs=$(grep -o '^#[0-9]*' "$log" | tail -n 1 | tr -d '#')
    fi
    if [ "$rc" -eq 0 ]; then verdict=ok; else verdict="FAILED (exit $rc, see fuzz/$log)"; status=1; fi
    line=$(printf '%-16s %12s executions in %ss  %s' "$t" "${execs:-?}" "$secs" "$verdict")
    echo "$line"
    summary+=("$line")
done
echo "---"
printf '%s\n' "${summary[@]}"
exit $status
