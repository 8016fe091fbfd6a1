#!/usr/bin/env python3
"""Tests of the installed greenboost package (tests/python-package/run.sh installs the
wheel in a fresh venv and runs this with the venv's python, from outside the tree).

Ends with `N passed, M failed`.

1. What pip installed: `import greenboost` comes from the venv, not the tree; the
   wheel's version is the module's; its files are the package's modules, all of them
   and nothing else (no tests, not the bench's gbgpu).
2. The public names are the submodules' objects; importing the package imports
   neither numpy nor torch (they are optional).
3. `python -m greenboost`: the smoke run, or without /dev/greenboost the error that
   says to load the module.
4. The tests in examples/python run against the installed package
   (GREENBOOST_TEST_INSTALLED=1) and pass.
"""

import importlib.metadata
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
SOURCE = os.path.join(ROOT, "python", "greenboost", "src", "greenboost")
EXAMPLES = os.path.join(ROOT, "examples", "python")
results = {"passed": 0, "failed": 0}


def check(name, condition, detail=""):
    results["passed" if condition else "failed"] += 1
    print(f"{'ok  ' if condition else 'FAIL'} {name}" + ("" if condition else f" {detail}"))


def python(*args, env=None, cwd=None):
    """Runs this interpreter (the venv's) and returns the finished process."""
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, env={**os.environ, **(env or {})},
                          cwd=cwd or os.getcwd())


def test_installed_files():
    import greenboost

    location = os.path.realpath(greenboost.__file__)
    check("greenboost is imported from the venv", location.startswith(os.path.realpath(sys.prefix) + os.sep)
          and not location.startswith(ROOT + os.sep), location)
    check("the wheel's version is greenboost.__version__",
          importlib.metadata.version("greenboost") == greenboost.__version__,
          f"{importlib.metadata.version('greenboost')} != {greenboost.__version__}")
    installed = {str(f) for f in importlib.metadata.files("greenboost") if str(f).endswith(".py")}
    expected = {f"greenboost/{name}" for name in os.listdir(SOURCE) if name.endswith(".py")}
    check("the wheel holds every module of python/greenboost/src and nothing else", installed == expected,
          f"installed {sorted(installed)}, source {sorted(expected)}")


def test_public_names():
    import greenboost
    import greenboost.kvcache
    import greenboost.zerocopy

    missing = [name for name in greenboost.__all__ if not hasattr(greenboost, name)]
    check("every name in greenboost.__all__ exists", not missing, f"missing {missing}")
    same = all(getattr(greenboost, name) is getattr(greenboost.zerocopy, name)
               for name in ("Device", "Buffer", "GreenBoostError", "TIER_T2", "TIER_T3", "ABI_VERSION"))
    same = same and greenboost.TieredKVCache is greenboost.kvcache.TieredKVCache
    check("greenboost.Device, .TieredKVCache, ... are the submodules' objects", same)
    loaded = python("-c", "import sys, greenboost; print(sorted({'numpy', 'torch'} & set(sys.modules)))")
    check("import greenboost imports neither numpy nor torch", loaded.returncode == 0 and loaded.stdout.strip() == "[]",
          loaded.stdout + loaded.stderr)


def test_smoke_run():
    run = python("-m", "greenboost")
    if os.path.exists("/dev/greenboost"):
        check("python -m greenboost runs against /dev/greenboost", run.returncode == 0 and "GreenBoost ABI" in run.stdout,
              run.stdout + run.stderr)
    else:
        check("python -m greenboost without /dev/greenboost says to load the module",
              run.returncode == 1 and "greenboost module is not loaded" in run.stderr, run.stdout + run.stderr)


def test_examples_against_installed():
    # What the examples' conftest.py makes `import greenboost.zerocopy, greenboost.kvcache` find.
    where = ("import runpy; runpy.run_path('conftest.py'); import greenboost.zerocopy, greenboost.kvcache; "
             "print(greenboost.zerocopy.__file__, greenboost.kvcache.__file__)")
    installed = python("-c", where, env={"GREENBOOST_TEST_INSTALLED": "1"}, cwd=EXAMPLES).stdout.split()
    tree = python("-c", where, cwd=EXAMPLES).stdout.split()
    check("with GREENBOOST_TEST_INSTALLED=1 the examples' tests import the installed package",
          len(installed) == 2 and all(os.path.realpath(f).startswith(os.path.realpath(sys.prefix)) for f in installed),
          str(installed))
    check("without it they import the tree's", len(tree) == 2 and all(os.path.realpath(f).startswith(SOURCE) for f in tree),
          str(tree))
    run = python("-m", "pytest", "-q", "-p", "no:cacheprovider", EXAMPLES, env={"GREENBOOST_TEST_INSTALLED": "1"})
    last = (run.stdout.strip().splitlines() or ["no output"])[-1]
    check("examples/python's tests (pytest) pass against the installed package",
          run.returncode == 0 and " passed" in last, "\n" + "\n".join((run.stdout + run.stderr).splitlines()[-20:]))
    print(f"    (examples/python: {last})")


def main():
    for section in (test_installed_files, test_public_names, test_smoke_run, test_examples_against_installed):
        try:
            section()
        except Exception as error:  # noqa: BLE001 - reported as a failure; the other sections still run
            check(f"{section.__name__} ran without an exception", False, repr(error))
    print(f"{results['passed']} passed, {results['failed']} failed")
    return 1 if results["failed"] else 0


if __name__ == "__main__":
    sys.exit(main())
