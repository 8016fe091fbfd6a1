#!/usr/bin/env python3
"""Checks kmod/'s import layering against the file map of kmod/README.md.

usage: check-kmod-layers.py [REPO_ROOT]

The map is the first table of kmod/README.md with the columns `file | holds | may
import`: one row per file of kmod/ (plus the ABI file the crate includes by #[path]);
the "may import" column lists, in backticks, the modules (Rust rows) or files (C rows)
the file may use, or "-" for none. Checked:

  map-complete      every file in kmod/ has a row and every row names an existing file
  mod-tree          every Rust row is a module the crate root declares, and back
  map-acyclic       the allowed imports form no cycle (so the map is a layering)
  imports <file>    every import of the file is allowed by its row. For Rust, an
                    import is every `crate::` / `super::` path anywhere in the code
                    (use trees, inline paths; comments and strings excluded), plus in
                    the crate root every path through a child module or an alias of
                    one; for C, every `#include "..."`
  no-cycle          the imports actually made form no cycle
  no-fn-statics     no `static` holds a function pointer (a callback stored in a
                    static would hide an edge)
  size              no source file in kmod/ exceeds 500 lines

Prints one line per check, notes for allowed imports that are unused, and a final
`kmod-layers: N passed, M failed`; exit status 1 on any failure. Python 3, no deps.
"""
import os
import re
import sys

MAX_LINES = 500
ROOT_FILE = 'greenboost.rs'
ROOT_NODE = 'crate'
SOURCE_EXT = ('.rs', '.c', '.h')


def strip_rust(text):
    """Blanks comments, string and char literals (keeping newlines and columns)."""
    out = []
    i, n = 0, len(text)

    def blank(s):
        return ''.join(c if c == '\n' else ' ' for c in s)

    while i < n:
        c = text[i]
        if text.startswith('//', i):
            j = text.find('\n', i)
            j = n if j < 0 else j
            out.append(blank(text[i:j]))
            i = j
        elif text.startswith('/*', i):
            depth, j = 1, i + 2
            while j < n and depth:
                if text.startswith('/*', j):
                    depth, j = depth + 1, j + 2
                elif text.startswith('*/', j):
                    depth, j = depth - 1, j + 2
                else:
                    j += 1
            out.append(blank(text[i:j]))
            i = j
        elif re.match(r'b?r(#*)"', text[i:i + 260]) and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] == '_')):
            m = re.match(r'b?r(#*)"', text[i:])
            end = '"' + m.group(1)
            j = text.find(end, i + m.end())
            j = n if j < 0 else j + len(end)
            out.append(blank(text[i:j]))
            i = j
        elif c == '"':
            j = i + 1
            while j < n and text[j] != '"':
                j += 2 if text[j] == '\\' else 1
            out.append(blank(text[i:j + 1]))
            i = j + 1
        elif c == "'":
            m = re.match(r"'(\\(x[0-9a-fA-F]{2}|u\{[0-9a-fA-F]+\}|.)|[^\\'])'", text[i:])
            if m:
                out.append(blank(m.group(0)))
                i += m.end()
            else:  # a lifetime
                out.append(c)
                i += 1
        else:
            out.append(c)
            i += 1
    return ''.join(out)


def strip_c(text):
    text = re.sub(r'/\*.*?\*/', lambda m: re.sub(r'[^\n]', ' ', m.group(0)), text, flags=re.S)
    return re.sub(r'//[^\n]*', '', text)


def use_group_heads(code, start):
    """First path segments of the use-tree group that opens at code[start] == '{'."""
    depth, i, item, heads = 0, start, '', []
    while i < len(code):
        c = code[i]
        if c == '{':
            depth += 1
            if depth > 1:
                item += c
        elif c == '}':
            depth -= 1
            if depth == 0:
                heads.append(item)
                break
            item += c
        elif c == ',' and depth == 1:
            heads.append(item)
            item = ''
        else:
            item += c
        i += 1
    result = []
    for h in heads:
        m = re.match(r'\s*([A-Za-z_]\w*)', h)
        if m:
            result.append(m.group(1))
    return result


def rust_paths(code):
    """(line, prefix, first segment) for every crate::/super:: path in stripped code."""
    found = []
    for m in re.finditer(r'(?<![\w$])(crate|super)\s*::\s*', code):
        line = code.count('\n', 0, m.start()) + 1
        rest = m.end()
        if rest < len(code) and code[rest] == '{':
            for head in use_group_heads(code, rest):
                found.append((line, m.group(1), head))
        else:
            mm = re.match(r'[A-Za-z_]\w*', code[rest:])
            if mm:
                found.append((line, m.group(1), mm.group(0)))
    return found


def parse_map(readme):
    rows = {}
    lines = open(readme).read().splitlines()
    in_table = False
    for line in lines:
        cells = [c.strip() for c in line.strip().strip('|').split('|')] if line.strip().startswith('|') else None
        if not in_table:
            if cells and len(cells) >= 3 and cells[0].lower() == 'file' and cells[2].lower() == 'may import':
                in_table = True
            continue
        if cells is None:
            break
        if set(''.join(cells)) <= set('-: '):
            continue
        names = re.findall(r'`([^`]+)`', cells[0])
        if not names:
            continue
        allowed = set(re.findall(r'`([^`]+)`', cells[2]))
        rows[names[0]] = allowed
    return rows


def tarjan_cycles(graph):
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1 or v in graph.get(v, ()):
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def main():
    repo = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), '..'))
    kmod = os.path.join(repo, 'kmod')
    results = []

    def check(name, ok, detail=''):
        results.append(ok)
        print(f"{'ok  ' if ok else 'FAIL'} {name}{(': ' + detail) if detail else ''}")

    rows = parse_map(os.path.join(kmod, 'README.md'))
    if not rows:
        check('map-complete', False, 'no `file | holds | may import` table in kmod/README.md')
        print(f'kmod-layers: {results.count(True)} passed, {results.count(False)} failed')
        return 1

    # The crate's module tree, from the root's `mod` declarations (with #[path]).
    root_code = strip_rust(open(os.path.join(kmod, ROOT_FILE)).read())
    root_raw = open(os.path.join(kmod, ROOT_FILE)).read()
    modules = {}  # module name -> path relative to kmod/
    for m in re.finditer(r'((?:#\[[^\]]*\]\s*)*)\bmod\s+([A-Za-z_]\w*)\s*;', root_code):
        name = m.group(2)
        attrs = root_raw[m.start(1):m.end(1)]
        pm = re.search(r'#\[\s*path\s*=\s*"([^"]+)"', attrs)
        modules[name] = pm.group(1) if pm else name + '.rs'
    node_of = {ROOT_FILE: ROOT_NODE}
    for name, rel in modules.items():
        node_of[os.path.normpath(rel)] = name
    aliases = {}  # root-level `use <child> as <alias>;`
    for m in re.finditer(r'\buse\s+(?:crate\s*::\s*)?([A-Za-z_]\w*)\s+as\s+([A-Za-z_]\w*)\s*;', root_code):
        if m.group(1) in modules:
            aliases[m.group(2)] = m.group(1)

    files = sorted(f for f in os.listdir(kmod) if os.path.isfile(os.path.join(kmod, f)))
    missing = [f for f in files if f not in rows]
    stale = [r for r in rows if not os.path.isfile(os.path.join(kmod, r))]
    check('map-complete', not missing and not stale,
          '; '.join(filter(None, [missing and 'no row for ' + ', '.join(missing),
                                  stale and 'row for a missing file: ' + ', '.join(stale)])))

    rust_rows = [r for r in rows if r.endswith('.rs')]
    undeclared = [r for r in rust_rows if os.path.normpath(r) not in node_of]
    mapped = {os.path.normpath(r) for r in rows}
    unmapped = [n for n, rel in modules.items() if os.path.normpath(rel) not in mapped]
    check('mod-tree', not undeclared and not unmapped,
          '; '.join(filter(None, [undeclared and 'not declared by the crate root: ' + ', '.join(undeclared),
                                  unmapped and 'declared but not in the map: ' + ', '.join(unmapped)])))

    def node(row):
        return node_of.get(os.path.normpath(row), row)

    allowed = {node(r): set(a) for r, a in rows.items()}
    known = set(allowed)
    bad_targets = sorted({f'{n} -> {t}' for n, ts in allowed.items() for t in ts if t not in known})
    cycles = tarjan_cycles(allowed)
    check('map-acyclic', not cycles and not bad_targets,
          '; '.join(filter(None, ['cycle among ' + ', '.join(c) for c in cycles] +
                           [bad_targets and 'unknown names in "may import": ' + ', '.join(bad_targets)])))

    actual = {}
    for row in sorted(rows, key=lambda r: (not r.endswith('.rs'), r)):
        path = os.path.join(kmod, row)
        if not os.path.isfile(path) or not row.endswith(SOURCE_EXT):
            continue
        me = node(row)
        text = open(path).read()
        edges = {}  # target -> first line
        if row.endswith('.rs'):
            code = strip_rust(text)
            if re.search(r'\bmod\s+[A-Za-z_]\w*\s*\{', code):
                check(f'imports {row}', False, 'inline `mod name { ... }`: super:: paths inside it are not handled')
                continue
            for line, prefix, head in rust_paths(code):
                if prefix == 'super' and me == ROOT_NODE:
                    check(f'imports {row}', False, f'line {line}: super:: in the crate root')
                    continue
                if head in modules:
                    target = head
                elif head in aliases:
                    target = aliases[head]
                elif head == 'self':
                    target = ROOT_NODE
                else:
                    target = ROOT_NODE  # an item of the crate root
                edges.setdefault(target, line)
            if me == ROOT_NODE:
                names = list(modules) + list(aliases)
                for m in re.finditer(r'(?<![\w:.$])(' + '|'.join(map(re.escape, names)) + r')\s*::', code):
                    target = aliases.get(m.group(1), m.group(1))
                    edges.setdefault(target, code.count('\n', 0, m.start()) + 1)
        else:
            code = strip_c(text)
            for m in re.finditer(r'^\s*#\s*include\s*"([^"]+)"', code, flags=re.M):
                edges.setdefault(os.path.normpath(m.group(1)), code.count('\n', 0, m.start()) + 1)
        edges.pop(me, None)
        actual[me] = set(edges)
        wrong = sorted(t for t in edges if t not in allowed.get(me, set()))
        check(f'imports {row}', not wrong,
              ', '.join(f'{t} (line {edges[t]}) not allowed' for t in wrong) or f'{len(edges)} imports allowed')
        for t in sorted(allowed.get(me, set()) - set(edges)):
            print(f'note {row}: may import {t} but does not')

    cycles = tarjan_cycles(actual)
    check('no-cycle', not cycles, '; '.join('cycle among ' + ', '.join(c) for c in cycles))

    fn_statics = []
    for f in files:
        if f.endswith('.rs'):
            code = strip_rust(open(os.path.join(kmod, f)).read())
            for m in re.finditer(r'\bstatic\s+(?:mut\s+)?[A-Za-z_]\w*\s*:([^=;]*)', code):
                if re.search(r'\bfn\s*\(', m.group(1)):
                    fn_statics.append(f'{f}:{code.count(chr(10), 0, m.start()) + 1}')
    check('no-fn-statics', not fn_statics, ', '.join(fn_statics))

    big = []
    for f in files:
        if f.endswith(SOURCE_EXT):
            count = sum(1 for _ in open(os.path.join(kmod, f)))
            if count > MAX_LINES:
                big.append(f'{f} ({count} lines)')
    check('size', not big, ', '.join(big) or f'every source file at most {MAX_LINES} lines')

    passed, failed = results.count(True), results.count(False)
    print(f'kmod-layers: {passed} passed, {failed} failed')
    return 1 if failed else 0


if __name__ == '__main__':
    sys.exit(main())
