#!/usr/bin/env python3
"""make lint's self-test of scripts/check-shim-stats.py: copies the counters' definition
and its mirrors into a temporary tree, requires the check to pass there, then plants one
defect at a time in a fresh copy and requires the check to fail on it:

  c-order       two counters of the C struct swapped
  c-missing     a counter left out of the C struct
  c-type        a 32-bit field of the C struct widened to 64 bits
  py-order      two counters of the Python _fields_ swapped
  py-type       a 32-bit field of the Python _fields_ widened to 64 bits
  rust-added    a counter appended to ShimStats with no mirror following it
  no-py-mirror  the Python mirror gone (a check with nothing to compare is a failure)

Each defect is a textual edit chosen from the parsed fields (which counters, which
32-bit field), and the self-test fails when an edit finds nothing to change, so that a
reformatted file cannot make a plant vacuous. Prints one line per case and
`shim-stats-selftest: N passed, M failed`; exit status 1 on any failure.
"""
import importlib.util
import os
import re
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
CHECK = os.path.join(HERE, 'check-shim-stats.py')

spec = importlib.util.spec_from_file_location('check_shim_stats', CHECK)
check = importlib.util.module_from_spec(spec)
spec.loader.exec_module(check)


def sources():
    """(the file defining ShimStats, [C mirrors], [Python mirrors]) of the real tree,
    relative to ROOT."""
    rust = check.definitions(ROOT)
    c = [p for p in check.walk(ROOT, 'tests', ('.h', '.c')) if check.c_fields(open(p).read()) is not None]
    py = [p for top in ('python', 'bench', 'tests') for p in check.walk(ROOT, top, ('.py',))
          if 'ShimStats' in open(p).read() and check.python_fields(open(p).read(), p) is not None]
    rel = lambda paths: [os.path.relpath(p, ROOT) for p in paths]  # noqa: E731
    return rel(rust)[0], rel(c), rel(py)


def swap(text, a, b):
    """text with the words a and b exchanged."""
    return re.sub(rf'\b({a}|{b})\b', lambda m: b if m.group(1) == a else a, text)


def main():
    rust, c_files, py_files = sources()
    fields = check.rust_fields(os.path.join(ROOT, rust))
    counters = [name for name, kind in fields if kind == 'u64']
    first, second = counters[-2], counters[-1]          # adjacent in every mirror
    narrow = next(name for name, kind in fields if kind == 'u32')
    middle = counters[len(counters) // 2]

    def c_type(text):
        return re.sub(rf'\bunsigned(\s+int)?\s+{narrow}\b', f'unsigned long long {narrow}', text)

    def c_missing(text):
        # The counter with the comma after it, or before it where it ends its line.
        planted = re.sub(rf'\b{middle}\s*,\s*', '', text, count=1)
        return planted if planted != text else re.sub(rf',\s*\b{middle}\b(?=\s*;)', '', text, count=1)

    def py_type(text):
        return re.sub(rf'(\("{narrow}",\s*ctypes\.)c_uint32\b', r'\1c_uint64', text)

    def rust_added(text):
        return re.sub(r'(pub struct ShimStats\s*\{.*?)(\n\})', r'\1\n    pub planted_counter: u64,\2', text,
                      count=1, flags=re.S)

    cases = [
        ('c-order', c_files[0], lambda t: swap(t, first, second)),
        ('c-missing', c_files[0], c_missing),
        ('c-type', c_files[0], c_type),
        ('py-order', py_files[0], lambda t: swap(t, first, second)),
        ('py-type', py_files[0], py_type),
        ('rust-added', rust, rust_added),
        ('no-py-mirror', py_files[0], None),
    ]
    passed = failed = 0

    def verdict(ok, name, why):
        nonlocal passed, failed
        print(f"{'ok  ' if ok else 'FAIL'} {name}: {why}")
        passed, failed = passed + ok, failed + (not ok)

    with tempfile.TemporaryDirectory(prefix='gb-shim-stats-') as tmp:
        def fresh_copy():
            shutil.rmtree(tmp)
            for rel in [rust, *c_files, *py_files]:
                os.makedirs(os.path.dirname(os.path.join(tmp, rel)), exist_ok=True)
                shutil.copy(os.path.join(ROOT, rel), os.path.join(tmp, rel))

        def run_check():
            return subprocess.run([sys.executable, CHECK, tmp], capture_output=True, text=True)

        fresh_copy()
        result = run_check()
        verdict(result.returncode == 0, 'clean-copy', 'the unmodified copy passes' if result.returncode == 0 else
                f'the unmodified copy fails: {result.stdout.strip()[-300:]}')
        for name, rel, plant in cases:
            fresh_copy()
            path = os.path.join(tmp, rel)
            text = open(path).read()
            if plant is None:
                os.remove(path)
            else:
                planted = plant(text)
                if planted == text:
                    verdict(False, name, f'the defect could not be planted in {rel} (its text changed?)')
                    continue
                open(path, 'w').write(planted)
            result = run_check()
            lines = [line for line in result.stdout.splitlines() if line.startswith('FAIL')]
            verdict(result.returncode != 0 and bool(lines), name,
                    f'the check fails: {lines[0][5:]}' if lines else 'the check passed the defect')
    print(f'shim-stats-selftest: {passed} passed, {failed} failed')
    return 1 if failed else 0


if __name__ == '__main__':
    sys.exit(main())
