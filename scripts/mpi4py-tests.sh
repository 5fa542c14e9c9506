#!/bin/sh
# Puts mpi4py's own test suite (from its source distribution on PyPI, pinned mpi4py==4.1.2) at
# DIR/mpi4py-4.1.2/test, unless it is there; prints that directory. PYTHON is the interpreter
# whose pip downloads it (default python3). Used by crates/p2pmpi-abi/tests/python.rs and
# bench/mpi4py_suite.sh. Nothing fetched is committed.
#
#   scripts/mpi4py-tests.sh DIR
set -u
[ $# -eq 1 ] || { echo "usage: $0 DIR" >&2; exit 2; }
dir=$1
version=4.1.2
tests=$dir/mpi4py-$version/test
if [ ! -f "$tests/runtests.py" ]; then
    mkdir -p "$dir" || exit 1
    tmp=$dir/download.$$
    rm -rf "$tmp"
    "${PYTHON:-python3}" -m pip download -q --disable-pip-version-check --no-binary :all: --no-deps \
        "mpi4py==$version" -d "$tmp" || { echo "$0: pip download mpi4py==$version failed" >&2; exit 1; }
    tar -xzf "$tmp/mpi4py-$version.tar.gz" -C "$tmp" || exit 1
    rm -rf "$dir/mpi4py-$version"
    mv -T "$tmp/mpi4py-$version" "$dir/mpi4py-$version" 2>/dev/null || [ -f "$tests/runtests.py" ] || exit 1
    rm -rf "$tmp"
fi
echo "$tests"
