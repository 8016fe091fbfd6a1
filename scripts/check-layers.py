#!/usr/bin/env python3
"""Checks a crate's import layering against the file map of its README.md.

usage: check-layers.py CRATE [REPO_ROOT]

CRATE is one of:

  kmod   kmod/ (crate root kmod/greenboost.rs); the map rows are the files of kmod/
         (plus the ABI file the crate includes by #[path]), Rust and C
  shim   shim/ (crate root shim/src/lib.rs), one folder per layer: the map has a row per
         folder (`src/<folder>/`) and per file at the root (`src/lib.rs`, ...), each with
         what it may import, and a row per file of a folder (`src/<folder>/<file>.rs`)
         with an empty "may import" cell: the files of a folder share its row

The map is the first table of CRATE/README.md with the columns `file | holds | may
import` (its "File map"), the file or folder named in backticks relative to CRATE/. A
unit is a module the crate root declares: a folder (its files below it) or one file. The
"may import" column lists, in backticks, the units (Rust rows) or files (C rows) the
unit may use, or "-" for none. Checked:

  map-complete      every file and folder of the crate has a row and every row names an
                    existing file or folder
  mod-tree          every Rust file is a module of the crate's module tree (`mod` lines
                    from the crate root down, #[path] honoured), and back
  map-acyclic       the allowed imports form no cycle (so the map is a layering) and
                    name only units/files of the map
  imports <file>    every import of the file is allowed by its unit's row. For Rust, an
                    import is every `crate::` / `super::` path anywhere in the code
                    (use trees, inline paths, inside inline `mod` blocks such as
                    `mod tests`, where `super::` is resolved; comments and strings
                    excluded), resolved to the module it names; every invocation of a
                    macro defined in a `#[macro_use]` module (an import of that module);
                    and in the crate root every path through a child module or an alias
                    of one. For C, every `#include "..."`
  no-cycle          the imports actually made form no cycle, between units and between
                    the files of one folder
  no-fn-statics     no `static` holds a function pointer (a callback stored in a
                    static would hide an edge). Exempt: a static the loader reads,
                    in `.init_array`/`.fini_array`/`.preinit_array` (#[link_section]),
                    holding a function of the same file: it is called by ld.so, not
                    by another module, so it hides no edge
  size              no source file of the crate exceeds 500 lines

Prints one line per check, notes for allowed imports that are unused, and a final
`CRATE-layers: N passed, M failed`; exit status 1 on any failure (2 on bad usage).
Python 3, no deps.
"""
import os
import re
import sys

MAX_LINES = 500
ROOT_NODE = 'crate'
LOADER_SECTIONS = ('.init_array', '.fini_array', '.preinit_array')


def kmod_files(base):
    return sorted(f for f in os.listdir(base) if os.path.isfile(os.path.join(base, f)))


def shim_files(base):
    found = []
    for top, _dirs, names in os.walk(os.path.join(base, 'src')):
        found += [os.path.relpath(os.path.join(top, n), base) for n in names if n.endswith('.rs')]
    return sorted(found)


# dir: the crate's directory (README.md there); root: its crate root, relative to dir;
# files: the files the map must cover, relative to dir; sources: the extensions that
# count as source (import and size checks).
CRATES = {
    'kmod': dict(dir='kmod', root='greenboost.rs', files=kmod_files, sources=('.rs', '.c', '.h')),
    'shim': dict(dir='shim', root='src/lib.rs', files=shim_files, sources=('.rs',)),
}


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


def line_of(code, pos):
    return code.count('\n', 0, pos) + 1


PATH_RE = r'[A-Za-z_]\w*(?:\s*::\s*[A-Za-z_]\w*)*'


def segments(text):
    return [x.strip() for x in text.split('::')]


def use_group_heads(code, start):
    """The leading path of each item of the use-tree group that opens at code[start] ==
    '{', as a list of segments (`{a::b::{c, d}, e}` gives [a, b] and [e])."""
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
        m = re.match(r'\s*(' + PATH_RE + ')', h)
        if m:
            result.append(segments(m.group(1)))
    return result


def matching_brace(code, start):
    """Index just past the '}' that closes the '{' at code[start]."""
    depth = 0
    for i in range(start, len(code)):
        if code[i] == '{':
            depth += 1
        elif code[i] == '}':
            depth -= 1
            if depth == 0:
                return i + 1
    return len(code)


def inline_modules(code):
    """(start, end, name) of every inline `mod name { ... }` block."""
    spans = []
    for m in re.finditer(r'\bmod\s+([A-Za-z_]\w*)\s*\{', code):
        spans.append((m.end() - 1, matching_brace(code, m.end() - 1), m.group(1)))
    return spans


def rust_paths(code):
    """(position, line, prefix, number of super segments, path segments after them) for
    every crate::/super:: path in stripped code; group items give one entry each."""
    found = []
    for m in re.finditer(r'(?<![\w$])(crate|super)((?:\s*::\s*super\b)*)\s*::\s*', code):
        if re.search(r'::\s*$', code[:m.start()]):
            continue  # `self::super::...` and the like: not a path start
        supers = 0 if m.group(1) == 'crate' else 1 + m.group(2).count('super')
        line = line_of(code, m.start())
        rest = m.end()
        if rest < len(code) and code[rest] == '{':
            for path in use_group_heads(code, rest):
                found.append((m.start(), line, m.group(1), supers, path))
        else:
            mm = re.match(PATH_RE, code[rest:])
            if mm:
                path = segments(mm.group(0))
                found.append((m.start(), line, m.group(1), supers, path))
                tail = re.match(r'\s*::\s*\{', code[rest + mm.end():])
                if tail:
                    brace = rest + mm.end() + tail.end() - 1
                    for sub in use_group_heads(code, brace):
                        found.append((m.start(), line, m.group(1), supers, path + sub))
    return found


def parse_map(readme):
    rows = {}
    in_table = False
    for line in open(readme).read().splitlines():
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
        rows[names[0]] = set(re.findall(r'`([^`]+)`', cells[2]))
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


def item_attributes(raw, start):
    """The attributes written right before the item whose keyword starts at raw[start]."""
    m = re.search(r'((?:#\[[^\[\]]*(?:\[[^\[\]]*\][^\[\]]*)*\]\s*)+)(?:pub(?:\s*\([^)]*\))?\s+)?$', raw[:start])
    return m.group(1) if m else ''


def module_tree(base, root_file, read):
    """The crate's file modules from the root's `mod` declarations down (#[path]
    honoured): {path relative to the crate's directory: module path ('' for the root,
    'memory::budget', ...)}, the module paths declared #[macro_use], and the declarations
    that name no file."""
    node_of, macro_use, dangling = {}, [], []

    def visit(rel, modpath):
        node_of[os.path.normpath(rel)] = modpath
        raw = read(rel)
        code = strip_rust(raw)
        own_dir = os.path.dirname(rel)
        if modpath and os.path.basename(rel) != 'mod.rs':
            own_dir = os.path.join(own_dir, os.path.splitext(os.path.basename(rel))[0])
        for m in re.finditer(r'((?:#\[[^\]]*\]\s*)*)(?:pub(?:\s*\([^)]*\))?\s+)?\bmod\s+([A-Za-z_]\w*)\s*;', code):
            name = m.group(2)
            attrs = raw[m.start(1):m.end(1)]
            child = f'{modpath}::{name}' if modpath else name
            pm = re.search(r'#\[\s*path\s*=\s*"([^"]+)"', attrs)
            if pm:
                child_rel = os.path.join(os.path.dirname(rel), pm.group(1))
            else:
                child_rel = os.path.join(own_dir, name + '.rs')
                if not os.path.isfile(os.path.join(base, child_rel)):
                    child_rel = os.path.join(own_dir, name, 'mod.rs')
            if re.search(r'#\[\s*macro_use\s*\]', attrs):
                macro_use.append(child)
            if os.path.isfile(os.path.join(base, child_rel)):
                visit(child_rel, child)
            else:
                dangling.append(f'{rel}: mod {name}')

    visit(root_file, '')
    return node_of, macro_use, dangling


def unit_of(modpath):
    """The unit of a module: the crate root's child it lies in (the root is its own)."""
    return modpath.split('::')[0] if modpath else ROOT_NODE


def main():
    if len(sys.argv) < 2 or sys.argv[1] not in CRATES:
        print(f'usage: check-layers.py {{{"|".join(CRATES)}}} [REPO_ROOT]', file=sys.stderr)
        return 2
    crate = sys.argv[1]
    spec = CRATES[crate]
    repo = os.path.abspath(sys.argv[2] if len(sys.argv) > 2 else os.path.join(os.path.dirname(__file__), '..'))
    base = os.path.join(repo, spec['dir'])
    root_file = spec['root']
    sources = spec['sources']
    results = []

    def check(name, ok, detail=''):
        results.append(ok)
        print(f"{'ok  ' if ok else 'FAIL'} {name}{(': ' + detail) if detail else ''}")

    def finish():
        passed, failed = results.count(True), results.count(False)
        print(f'{crate}-layers: {passed} passed, {failed} failed')
        return 1 if failed else 0

    readme = os.path.join(base, 'README.md')
    rows = parse_map(readme) if os.path.isfile(readme) else {}
    if not rows:
        check('map-complete', False, f'no `file | holds | may import` table in {spec["dir"]}/README.md')
        return finish()

    def read(rel):
        return open(os.path.join(base, rel)).read()

    node_of, macro_use, dangling = module_tree(base, root_file, read)
    modules = set(node_of.values()) - {''}
    top = {m for m in modules if '::' not in m}
    root_code = strip_rust(read(root_file))
    aliases = {}  # root-level `use <child> as <alias>;`
    for m in re.finditer(r'\buse\s+(?:crate\s*::\s*)?([A-Za-z_]\w*)\s+as\s+([A-Za-z_]\w*)\s*;', root_code):
        if m.group(1) in top:
            aliases[m.group(2)] = m.group(1)

    files = spec['files'](base)
    folders = sorted({os.path.dirname(f) + '/' for f in files if f.endswith('.rs') and node_of.get(os.path.normpath(f), '').count('::')})
    folder_rows = [r for r in rows if r.endswith('/')]
    missing = [f for f in files + folders if f not in rows]
    stale = [r for r in rows if not os.path.exists(os.path.join(base, r))]
    check('map-complete', not missing and not stale,
          '; '.join(filter(None, [missing and 'no row for ' + ', '.join(missing),
                                  stale and 'row for a missing file: ' + ', '.join(stale)])))

    rust_rows = [r for r in rows if r.endswith('.rs')]
    undeclared = [r for r in rust_rows if os.path.normpath(r) not in node_of]
    mapped = {os.path.normpath(r) for r in rows}
    unmapped = [rel for rel in node_of if rel not in mapped]
    check('mod-tree', not undeclared and not unmapped and not dangling,
          '; '.join(filter(None, [undeclared and 'not in the module tree: ' + ', '.join(undeclared),
                                  unmapped and 'in the module tree but not in the map: ' + ', '.join(unmapped),
                                  dangling and 'declared with no file: ' + ', '.join(dangling)])))

    def unit_row(row):
        """The unit a row stands for: a folder row's folder, a root file's module, a C file."""
        if row.endswith('/'):
            return os.path.basename(row.rstrip('/'))
        rel = os.path.normpath(row)
        return unit_of(node_of[rel]) if rel in node_of else row

    allowed, shared = {}, []
    for r, a in rows.items():
        modpath = node_of.get(os.path.normpath(r), '')
        if r.endswith('.rs') and ('::' in modpath or (modpath and os.path.basename(r) == 'mod.rs')):
            if a - {'-'}:
                shared.append(r)  # a folder's file takes its folder's row
            continue
        allowed[unit_row(r)] = set(a) - {'-'}
    known = set(allowed)
    bad_targets = sorted({f'{n} -> {t}' for n, ts in allowed.items() for t in ts if t not in known})
    cycles = tarjan_cycles(allowed)
    check('map-acyclic', not cycles and not bad_targets and not shared,
          '; '.join(filter(None, ['cycle among ' + ', '.join(c) for c in cycles] +
                           [bad_targets and 'unknown names in "may import": ' + ', '.join(bad_targets),
                            shared and 'a folder\'s file lists imports of its own (its folder\'s row holds them): '
                            + ', '.join(shared)])))

    # Macros of #[macro_use] modules are in scope everywhere after their `mod` line.
    macro_home = {}
    for rel, modpath in node_of.items():
        if modpath in macro_use:
            for m in re.finditer(r'\bmacro_rules\s*!\s*([A-Za-z_]\w*)', strip_rust(read(rel))):
                macro_home[m.group(1)] = modpath

    def resolve(path):
        """The module a path of absolute segments names: its longest prefix that is one."""
        for n in range(len(path), 0, -1):
            if '::'.join(path[:n]) in modules:
                return '::'.join(path[:n])
        return ''

    actual = {}  # unit -> units it imports
    file_edges = {}  # module -> modules of its own unit it imports
    for row in sorted(rows, key=lambda r: (not r.endswith('.rs'), r)):
        if row.endswith('/') or not os.path.isfile(os.path.join(base, row)) or not row.endswith(sources):
            continue
        rel = os.path.normpath(row)
        me = node_of.get(rel, row)
        my_unit = unit_of(me) if rel in node_of else row
        text = read(row)
        edges = {}  # target -> first line
        problems = []
        if row.endswith('.rs'):
            code = strip_rust(text)
            own_path = me.split('::') if me else []
            spans = inline_modules(code)
            for pos, line, prefix, supers, path in rust_paths(code):
                scope = own_path + [name for start, end, name in spans if start <= pos < end]
                if supers > len(scope):
                    problems.append(f'line {line}: {"super::" * supers} goes above the crate root')
                    continue
                absolute = (scope[:len(scope) - supers] if prefix == 'super' else []) + path
                if not me and absolute and absolute[0] in aliases:
                    absolute = [aliases[absolute[0]]] + absolute[1:]
                edges.setdefault(resolve(absolute), line)
            if macro_home:
                pattern = r'(?<![\w$:!])(' + '|'.join(map(re.escape, sorted(macro_home))) + r')\s*!\s*[(\[{]'
                for m in re.finditer(pattern, code):
                    edges.setdefault(macro_home[m.group(1)], line_of(code, m.start()))
            if not me:
                names = sorted(top) + list(aliases)
                for m in re.finditer(r'(?<![\w:.$])(' + '|'.join(map(re.escape, names)) + r')\s*::', code):
                    edges.setdefault(aliases.get(m.group(1), m.group(1)), line_of(code, m.start()))
            edges = {(t or ''): ln for t, ln in edges.items()}
            units = {}
            for t, ln in edges.items():
                u = unit_of(t)
                if u != my_unit:
                    units.setdefault(u, ln)
                elif t != me and not me.startswith(t + '::'):
                    file_edges.setdefault(me, set()).add(t)  # a file of its own folder
            edges = units
        else:
            code = strip_c(text)
            for m in re.finditer(r'^\s*#\s*include\s*"([^"]+)"', code, flags=re.M):
                edges.setdefault(os.path.normpath(m.group(1)), line_of(code, m.start()))
            edges.pop(my_unit, None)
        actual.setdefault(my_unit, set()).update(edges)
        wrong = sorted(t for t in edges if t not in allowed.get(my_unit, set()))
        problems += [f'{t} (line {edges[t]}) not allowed' for t in wrong]
        check(f'imports {row}', not problems, ', '.join(problems) or f'{len(edges)} imports allowed')
    for unit in sorted(allowed):
        for t in sorted(allowed[unit] - actual.get(unit, set())):
            print(f'note {unit}: may import {t} but does not')

    cycles = tarjan_cycles(actual) + tarjan_cycles(file_edges)
    check('no-cycle', not cycles, '; '.join('cycle among ' + ', '.join(c) for c in cycles))

    fn_statics, exempt = [], []
    for f in files:
        if not f.endswith('.rs'):
            continue
        raw = read(f)
        code = strip_rust(raw)
        for m in re.finditer(r'\bstatic\s+(?:mut\s+)?([A-Za-z_]\w*)\s*:([^=;]*)(?:=\s*([^;]*))?', code):
            if not re.search(r'\bfn\s*\(', m.group(2)):
                continue
            where = f'{f}:{line_of(code, m.start())}'
            attrs = item_attributes(raw, m.start())
            section = re.search(r'#\[\s*link_section\s*=\s*"([^"]+)"', attrs)
            value = (m.group(3) or '').strip()
            if (section and section.group(1) in LOADER_SECTIONS and re.fullmatch(r'[A-Za-z_]\w*', value)
                    and re.search(r'\bfn\s+' + re.escape(value) + r'\b', code)):
                exempt.append(f'{where} ({section.group(1)}: {value})')
            else:
                fn_statics.append(where)
    check('no-fn-statics', not fn_statics,
          ', '.join(fn_statics) or ('loader entries only: ' + ', '.join(exempt) if exempt else ''))

    big = []
    for f in files:
        if f.endswith(sources):
            count = sum(1 for _ in open(os.path.join(base, f)))
            if count > MAX_LINES:
                big.append(f'{f} ({count} lines)')
    check('size', not big, ', '.join(big) or f'every source file at most {MAX_LINES} lines')

    return finish()


if __name__ == '__main__':
    sys.exit(main())
