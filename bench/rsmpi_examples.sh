#!/usr/bin/env bash
# rsmpi's own example programs, compiled unchanged against p2pmpi and run on 2 and 3 processes.
#
#   bench/rsmpi_examples.sh RSMPI_DIR            # a checkout of rsmpi (or the unpacked `mpi` crate)
#   ONLY="cartesian reduce" bench/rsmpi_examples.sh RSMPI_DIR
#
# The examples are copied into a scratch crate ($OUT, default /tmp/rsmpi-examples) whose only
# change is the dependency line: `mpi = { package = "p2pmpi", path = ... }` (with rsmpi's features).
# Each example that compiles is run with `p2pmpirun --local -n 2` and `-n 3` (60 s limit each).
# Prints one line per example (PASS, FAIL n=N, NOCOMPILE) and a closing "N passed, N failed".
set -u
RSMPI=${1:?usage: $0 RSMPI_DIR}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
OUT=${OUT:-/tmp/rsmpi-examples}
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$OUT/target}
mkdir -p "$OUT/examples" "$OUT/src"
rm -f "$OUT"/examples/*.rs
cp "$RSMPI"/examples/*.rs "$OUT/examples/"
echo "" > "$OUT/src/lib.rs"
cat > "$OUT/Cargo.toml" <<TOML
[package]
name = "rsmpi-examples-on-p2pmpi"
version = "0.0.0"
edition = "2021"
publish = false

[workspace]

# What rsmpi's own manifest gives its examples: its feature names (the examples test
# \`feature = "user-operations"\`), the \`msmpi\` cfg its build script declares, and its
# dev-dependencies.
[features]
default = ["user-operations", "derive", "complex"]
user-operations = ["mpi/user-operations"]
derive = ["mpi/derive"]
complex = ["mpi/complex"]

[lints.rust]
unexpected_cfgs = { level = "warn", check-cfg = ['cfg(msmpi)'] }

[dependencies]
mpi = { package = "p2pmpi", path = "$ROOT/crates/p2pmpi" }
num-complex = "0.4"
memoffset = "0.9"
TOML
( cd "$ROOT" && cargo build -q -p p2pmpi-cli --bin p2pmpirun ) || exit 2
RUN=$CARGO_TARGET_DIR/debug/p2pmpirun
[ -x "$RUN" ] || RUN=$(ls "${CARGO_TARGET_DIR}"/debug/p2pmpirun 2>/dev/null)
names=${ONLY:-$(cd "$OUT/examples" && ls *.rs | sed 's/\.rs$//')}
pass=0; fail=0
for ex in $names; do
  if ! (cd "$OUT" && cargo build -q --example "$ex" >"$OUT/$ex.build.log" 2>&1); then
    echo "NOCOMPILE $ex"; fail=$((fail+1)); continue
  fi
  ok=1
  for n in 2 3; do
    if ! timeout 60 "$RUN" --local -n $n "$CARGO_TARGET_DIR/debug/examples/$ex" >"$OUT/$ex.$n.log" 2>&1; then
      echo "FAIL $ex n=$n (log: $OUT/$ex.$n.log)"; ok=0; break
    fi
  done
  if [ $ok = 1 ]; then echo "PASS $ex"; pass=$((pass+1)); else fail=$((fail+1)); fi
done
echo "$pass passed, $fail failed"
