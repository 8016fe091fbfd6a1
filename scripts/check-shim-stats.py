#!/usr/bin/env python3
"""Checks that the mirrors of the shim's counters agree with their one definition, the
#[repr(C)] struct ShimStats in the shim's stats.rs, which `greenboost_shim_stats_sized`
copies out as bytes: a mirror that differs reads every field after the difference from
the wrong place, and nothing else would notice.

usage: check-shim-stats.py [REPO_ROOT]

The definition: `pub struct ShimStats` in the one .rs file under shim/src that defines
it (searched recursively, wherever the shim's layers put stats.rs): each `pub NAME: TYPE`
in order, TYPE u64, u32 or i32.
The mirrors, found by what they define (so that a moved file is still checked, and a
lost one is a failure):
  C       every .h/.c file under tests/ that defines `struct shim_stats { ... }`: the
          fields in the same order with the same types (unsigned long long / uint64_t,
          unsigned / uint32_t, int / int32_t); after them it may end in one u64 array,
          the room a test program leaves for fields appended later (the sized call
          fills only what it knows and the rest stays 0);
  Python  every .py file under python/, bench/ and tests/ whose `class ShimStats` sets
          `_fields_`: evaluated with ctypes only, the same names, order and types
          (c_uint64, c_uint32, c_int32; c_ulonglong and the like are the same types).
At least one mirror of each language must exist. Prints one line per check and
`shim-stats: N passed, M failed`; exit status 1 on any failure. Python 3, no deps.
scripts/check-shim-stats-selftest.py plants defects in a copy and requires failures.
"""
import ast
import ctypes
import os
import re
import sys

SKIP_DIRS = {'.git', 'target', 'build', '__pycache__', 'node_modules'}
C_TYPES = {
    'unsigned long long': 'u64', 'unsigned long long int': 'u64', 'uint64_t': 'u64',
    'unsigned': 'u32', 'unsigned int': 'u32', 'uint32_t': 'u32',
    'int': 'i32', 'signed int': 'i32', 'int32_t': 'i32',
    'long long': 'i64', 'int64_t': 'i64',
}
CTYPES = {ctypes.c_uint64: 'u64', ctypes.c_uint32: 'u32', ctypes.c_int32: 'i32', ctypes.c_int64: 'i64'}


def walk(root, top, suffixes):
    """Files under root/top ending in one of suffixes, in a stable order."""
    found = []
    for here, dirs, files in os.walk(os.path.join(root, top)):
        dirs[:] = sorted(d for d in dirs if d not in SKIP_DIRS)
        found += [os.path.join(here, f) for f in sorted(files) if f.endswith(suffixes)]
    return found


def strip_comments(text):
    text = re.sub(r'/\*.*?\*/', ' ', text, flags=re.S)
    return re.sub(r'//[^\n]*', '', text)


def definitions(root):
    """The .rs files under shim/src that define `pub struct ShimStats` (comments aside)."""
    return [p for p in walk(root, 'shim/src', ('.rs',))
            if re.search(r'\bpub struct ShimStats\b', strip_comments(open(p).read()))]


def rust_fields(path):
    """[(name, type)] of `pub struct ShimStats`, which must be #[repr(C)]."""
    text = strip_comments(open(path).read())
    match = re.search(r'((?:#\[[^\]]*\]\s*)*)pub struct ShimStats\s*\{(.*?)\n\}', text, re.S)
    if not match:
        raise ValueError('no `pub struct ShimStats { ... }`')
    if '#[repr(C)]' not in match.group(1).replace(' ', ''):
        raise ValueError('ShimStats is not #[repr(C)]: its layout is not C\'s')
    fields = []
    for decl in match.group(2).split(','):
        decl = re.sub(r'#\[[^\]]*\]', '', decl).strip()
        if not decl:
            continue
        field = re.fullmatch(r'pub\s+(\w+)\s*:\s*(\w+)', decl)
        if not field or field.group(2) not in ('u64', 'u32', 'i32'):
            raise ValueError(f'unexpected field `{decl}` (want `pub NAME: u64|u32|i32`)')
        fields.append((field.group(1), field.group(2)))
    return fields


def c_fields(text):
    """[(name, type, array length or None)] of `struct shim_stats { ... }` in C source
    text; None when the text defines no such struct."""
    match = re.search(r'struct\s+shim_stats\s*\{(.*?)\}\s*;', strip_comments(text), re.S)
    if not match:
        return None
    fields = []
    for decl in match.group(1).split(';'):
        decl = ' '.join(decl.split())
        if not decl:
            continue
        head = re.match(r'((?:(?:unsigned|signed|long|int|u?int(?:32|64)_t)\s+)+)(.*)', decl + ' ')
        kind = C_TYPES.get(head.group(1).strip()) if head else None
        if not kind:
            raise ValueError(f'unexpected declaration `{decl}`')
        for declarator in head.group(2).split(','):
            item = re.fullmatch(r'\s*(\w+)\s*(?:\[\s*(\d+)\s*\])?\s*', declarator)
            if not item:
                raise ValueError(f'unexpected declarator `{declarator.strip()}` in `{decl}`')
            fields.append((item.group(1), kind, int(item.group(2)) if item.group(2) else None))
    return fields


def python_fields(text, path):
    """[(name, type)] of `class ShimStats`'s `_fields_`, evaluated with ctypes only;
    None when the file has no such class."""
    for node in ast.walk(ast.parse(text, path)):
        if isinstance(node, ast.ClassDef) and node.name == 'ShimStats':
            for item in node.body:
                if isinstance(item, ast.Assign) and any(getattr(t, 'id', '') == '_fields_' for t in item.targets):
                    value = eval(compile(ast.Expression(item.value), path, 'eval'), {'ctypes': ctypes})
                    fields = []
                    for name, kind in value:
                        if kind not in CTYPES:
                            raise ValueError(f'field {name}: type {kind.__name__} is none of {sorted(CTYPES.values())}')
                        fields.append((name, CTYPES[kind]))
                    return fields
    return None


def differences(want, got):
    """The first difference between two [(name, type)] lists, as a sentence; None if none."""
    for index, (w, g) in enumerate(zip(want, got)):
        if w != g:
            return f'field {index} is `{g[0]}: {g[1]}`, ShimStats has `{w[0]}: {w[1]}` there'
    if len(got) < len(want):
        return f'ends after {len(got)} fields; ShimStats goes on with `{want[len(got)][0]}` ({len(want)} fields)'
    if len(got) > len(want):
        return f'has {len(got) - len(want)} field(s) more than ShimStats, from `{got[len(want)][0]}` on'
    return None


def check_c(want, fields):
    if fields and fields[-1][2] is not None:
        if fields[-1][1] != 'u64':
            return f'the room for appended fields, `{fields[-1][0]}`, is not a u64 array'
        fields = fields[:-1]
    arrays = [name for name, _, length in fields if length is not None]
    if arrays:
        return f'array `{arrays[0]}` before the last field (only the room for appended fields may be one)'
    return differences(want, [(name, kind) for name, kind, _ in fields])


def main():
    root = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), '..'))
    passed, failed = 0, 0

    def report(ok, what):
        nonlocal passed, failed
        print(f"{'ok  ' if ok else 'FAIL'} {what}")
        passed, failed = passed + ok, failed + (not ok)

    found = definitions(root)
    if len(found) != 1:
        names = ', '.join(os.path.relpath(p, root) for p in found) or 'none'
        report(False, f'shim/src/**/*.rs defining pub struct ShimStats: want exactly one, found {names}')
        print(f'shim-stats: {passed} passed, {failed} failed')
        return 1
    rel = os.path.relpath(found[0], root)
    try:
        want = rust_fields(found[0])
    except ValueError as error:
        report(False, f'{rel}: {error}')
        print(f'shim-stats: {passed} passed, {failed} failed')
        return 1
    report(True, f'{rel}: ShimStats has {len(want)} fields')

    mirrors = {'C': 0, 'Python': 0}
    for path in walk(root, 'tests', ('.h', '.c')):
        try:
            fields = c_fields(open(path).read())
        except ValueError as error:
            report(False, f'{os.path.relpath(path, root)}: struct shim_stats: {error}')
            mirrors['C'] += 1
            continue
        if fields is not None:
            mirrors['C'] += 1
            why = check_c(want, fields)
            report(why is None, f'{os.path.relpath(path, root)}: struct shim_stats' + (f': {why}' if why else ''))
    for top in ('python', 'bench', 'tests'):
        for path in walk(root, top, ('.py',)):
            text = open(path).read()
            if 'ShimStats' not in text:
                continue
            try:
                fields = python_fields(text, path)
            except (ValueError, SyntaxError, NameError, AttributeError, TypeError) as error:
                report(False, f'{os.path.relpath(path, root)}: ShimStats._fields_: {error}')
                mirrors['Python'] += 1
                continue
            if fields is not None:
                mirrors['Python'] += 1
                why = differences(want, fields)
                report(why is None, f'{os.path.relpath(path, root)}: ShimStats._fields_' + (f': {why}' if why else ''))
    for language, count in mirrors.items():
        report(count > 0, f'{language} mirrors of ShimStats found: {count}')
    print(f'shim-stats: {passed} passed, {failed} failed')
    return 1 if failed else 0


if __name__ == '__main__':
    sys.exit(main())
