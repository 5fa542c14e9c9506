#!/bin/sh
# Makes DIR hold p2pmpi's library with MPICH's ABI: libmpi.so.12 (a copy of the built cdylib,
# whose DT_SONAME is libmpi.so.12) and the names programs and loaders look for, libmpi.so and
# libmpich.so.12, as symlinks to it. Put DIR first on LD_LIBRARY_PATH to run a program linked
# by Debian's mpicc.mpich, or mpi4py's binary wheel, on p2pmpi.
#
#   scripts/abi-lib.sh DIR [LIBRARY]
#
# LIBRARY defaults to the debug build: ${CARGO_TARGET_DIR:-target}/debug/libp2pmpi_abi.so
# (build it with `cargo build -p p2pmpi-abi`, or --release and pass its path).
set -eu
if [ $# -lt 1 ] || [ $# -gt 2 ]; then
    echo "usage: $0 DIR [LIBRARY]" >&2
    exit 2
fi
dir=$1
lib=${2:-${CARGO_TARGET_DIR:-target}/debug/libp2pmpi_abi.so}
if [ ! -f "$lib" ]; then
    echo "$0: $lib not found (build it with: cargo build -p p2pmpi-abi)" >&2
    exit 1
fi
mkdir -p "$dir"
# Copied to a name of this process and renamed: a program running with the old copy keeps
# it, and two runs at once never leave a half-written file. An identical copy is left alone,
# and the names are made by renaming too (never a moment without them): test processes make
# this directory again and again while programs of other tests are starting from it, and a
# loader check that saw libmpi.so.12 replaced between two of its looks took the names for two
# libraries.
if ! cmp -s "$lib" "$dir/libmpi.so.12" 2>/dev/null; then
    cp "$lib" "$dir/.libmpi.so.12.$$"
    mv -f "$dir/.libmpi.so.12.$$" "$dir/libmpi.so.12"
fi
for name in libmpi.so libmpich.so.12; do
    if [ "$(readlink "$dir/$name" 2>/dev/null)" != libmpi.so.12 ]; then
        ln -sfn libmpi.so.12 "$dir/.$name.$$"
        mv -fT "$dir/.$name.$$" "$dir/$name"
    fi
done
