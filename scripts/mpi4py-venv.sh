#!/bin/sh
# Makes DIR a Python virtual environment holding mpi4py's binary wheel from PyPI, pinned
# (mpi4py==4.1.2, the version issue 37 measures), unless it already holds it. Used by the tests
# (crates/p2pmpi-abi/tests/python.rs, crates/p2pmpi-cli/tests/c_and_python.rs) and by
# bench/mpi4py_suite.sh. Made aside and renamed: a run at the same time never sees half of it.
#
#   scripts/mpi4py-venv.sh DIR
#
# PYTHON: the interpreter the environment is made from (default python3 on PATH).
set -u
[ $# -eq 1 ] || { echo "usage: $0 DIR" >&2; exit 2; }
dir=$1
version=4.1.2
ready() {
    LD_LIBRARY_PATH= "$1/bin/python3" -c "import mpi4py, sys; sys.exit(mpi4py.__version__ != '$version')" 2>/dev/null
}
ready "$dir" && exit 0
tmp=$dir.$$
rm -rf "$tmp"
"${PYTHON:-python3}" -m venv "$tmp" || { echo "$0: ${PYTHON:-python3} -m venv failed (apt-get install python3-venv)" >&2; exit 1; }
if ! "$tmp/bin/python3" -m pip install -q --disable-pip-version-check --only-binary :all: "mpi4py==$version"; then
    rm -rf "$tmp"
    echo "$0: pip install mpi4py==$version failed" >&2
    exit 1
fi
mv -T "$tmp" "$dir" 2>/dev/null || rm -rf "$tmp"
ready "$dir" || { echo "$0: $dir has no mpi4py $version after the install" >&2; exit 1; }
