"""Runs one module of mpi4py's test suite on every rank of an MPI job and writes each
rank's outcomes, one line per test as it ends, to OUTDIR/rank<R>.txt:

    START <test id>        (before the test runs: a time-out leaves it last)
    <outcome> <test id>    (ok, fail, error, skip, xfail, xpass)

Usage (run by bench/mpi4py_suite.sh): python3 mpi4py_driver.py TESTDIR OUTDIR MODULE [EXCLUDED...]
"""

import os
import sys
import unittest


def main():
    testdir, outdir, module = sys.argv[1:4]
    excluded = set(sys.argv[4:])
    sys.path.insert(0, testdir)
    os.chdir(testdir)
    from mpi4py import MPI

    rank = MPI.COMM_WORLD.Get_rank()
    out = open(os.path.join(outdir, f"rank{rank}.txt"), "w", buffering=1)

    class Result(unittest.TestResult):
        def startTest(self, test):
            out.write(f"START {test.id()}\n")
            super().startTest(test)

        def addSuccess(self, test):
            out.write(f"ok {test.id()}\n")

        def addFailure(self, test, err):
            out.write(f"fail {test.id()}\n")
            super().addFailure(test, err)

        def addError(self, test, err):
            out.write(f"error {test.id()}\n")
            super().addError(test, err)

        def addSkip(self, test, reason):
            out.write(f"skip {test.id()}\n")

        def addExpectedFailure(self, test, err):
            out.write(f"xfail {test.id()}\n")

        def addUnexpectedSuccess(self, test):
            out.write(f"xpass {test.id()}\n")

        def addSubTest(self, test, subtest, err):
            if err is not None:
                out.write(f"fail {test.id()}\n")

    suite = unittest.defaultTestLoader.loadTestsFromName(module)

    def flatten(s):
        for t in s:
            if isinstance(t, unittest.TestSuite):
                yield from flatten(t)
            else:
                yield t

    kept = unittest.TestSuite(t for t in flatten(suite) if t.id() not in excluded)
    result = Result()
    kept.run(result)
    if os.environ.get("MPI4PY_DRIVER_TRACE"):
        for test, tb in result.errors + result.failures:
            sys.stderr.write(f"[{rank}] {test.id()}\n{tb}\n")
    out.close()


# Only as the program: mpi4py.futures' workers import the parent's main module (under another
# name) to find its functions, and must not run the suite again.
if __name__ == "__main__":
    main()
