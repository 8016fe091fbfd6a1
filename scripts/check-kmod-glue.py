#!/usr/bin/env python3
"""Checks that kmod/glue.h and its Rust mirrors agree (the C side of what
abi/tests/header.rs does for the ABI).

usage: check-kmod-glue.py [REPO_ROOT]

glue.h declares two kinds of functions:
  gb_rs_*  C -> Rust: each must be defined in kmod/entry.rs as
           `#[no_mangle] ... unsafe extern "C" fn` with the same arguments and return
           type, and no other kmod/*.rs file may define a #[no_mangle] function;
  gb_*     Rust -> C: each must have an `extern "C"` declaration in kmod/glue_ffi.rs
           with the same arguments and return type, and one definition in the C file
           its glue.h section names ("implemented in glue.c").
And back: every extern "C" declaration in glue_ffi.rs, every #[no_mangle] function in
entry.rs and every non-static gb_* function defined in kmod/*.c must be declared in
glue.h. The structs glue.h defines (gb_chunk, gb_params) must match their #[repr(C)]
mirrors in glue_ffi.rs field by field.

Types are compared after a textual mapping to the x86_64 (LP64) ABI: int, c_int and
i32 are one type, unsigned long, c_ulong, u64 and size_t/usize another, and so on;
`T *` is `*mut T`, `const T *` is `*const T`; `struct X *` is `*mut bindings::X` except
for the glue's own structs (gb_chunk: Chunk, gb_params: Params) and the opaque ones
glue_ffi.rs declares (dma_buf: DmaBuf, eventfd_ctx: EventfdCtx); `enum X` is
`bindings::X`. Prints one line per check and `kmod-glue: N passed, M failed`; exit
status 1 on any failure. Python 3, no deps.
"""
import os
import re
import sys

# C scalar spellings -> canonical (LP64) Rust type.
C_SCALARS = {
    'int': 'i32', 'signed int': 'i32', 'unsigned int': 'u32', 'unsigned': 'u32',
    'long': 'i64', 'long int': 'i64', 'unsigned long': 'u64', 'unsigned long int': 'u64',
    'long long': 'i64', 'unsigned long long': 'u64', 'short': 'i16', 'unsigned short': 'u16',
    'char': 'i8', 'signed char': 'i8', 'unsigned char': 'u8',
    'bool': 'bool', '_Bool': 'bool', 'void': 'void',
    'size_t': 'u64', 'ssize_t': 'i64',
    'u8': 'u8', 'u16': 'u16', 'u32': 'u32', 'u64': 'u64',
    's8': 'i8', 's16': 'i16', 's32': 'i32', 's64': 'i64',
    '__u32': 'u32', '__u64': 'u64', '__s32': 'i32', '__s64': 'i64',
}
# Rust scalar spellings -> canonical.
RUST_SCALARS = {
    'c_int': 'i32', 'c_uint': 'u32', 'c_long': 'i64', 'c_ulong': 'u64', 'c_longlong': 'i64',
    'c_ulonglong': 'u64', 'c_short': 'i16', 'c_ushort': 'u16', 'c_char': 'i8', 'c_schar': 'i8',
    'c_uchar': 'u8', 'c_void': 'void', 'usize': 'u64', 'isize': 'i64',
    'i8': 'i8', 'i16': 'i16', 'i32': 'i32', 'i64': 'i64', 'u8': 'u8', 'u16': 'u16', 'u32': 'u32',
    'u64': 'u64', 'bool': 'bool',
}
# C structs with a Rust definition of their own in glue_ffi.rs.
OWN_STRUCTS = {'gb_chunk': 'Chunk', 'gb_params': 'Params', 'dma_buf': 'DmaBuf', 'eventfd_ctx': 'EventfdCtx'}
RUST_PREFIXES = ('kernel::ffi::', 'core::ffi::', 'crate::glue_ffi::', 'ffi::', 'self::')


def strip_c(text):
    text = re.sub(r'/\*.*?\*/', ' ', text, flags=re.S)
    return re.sub(r'//[^\n]*', '', text)


def strip_rust_comments(text):
    text = re.sub(r'/\*.*?\*/', ' ', text, flags=re.S)
    return re.sub(r'//[^\n]*', '', text)


def c_type(decl):
    """Canonical type of a C declaration without its name ('const struct x **')."""
    decl = ' '.join(decl.replace('*', ' * ').split())
    stars = decl.count('*')
    words = [w for w in decl.replace('*', ' ').split()]
    const = 'const' in words
    words = [w for w in words if w not in ('const', 'volatile', 'restrict', '__user')]
    if words and words[0] in ('struct', 'enum', 'union'):
        base = ' '.join(words[:2])
        if words[0] == 'struct' and words[1] in OWN_STRUCTS:
            base = OWN_STRUCTS[words[1]]
        else:
            base = 'bindings::' + words[1]
    else:
        base = C_SCALARS.get(' '.join(words))
        if base is None:
            return None
    for level in range(stars):
        base = ('*const ' if (const and level == 0) else '*mut ') + base
    return base


def c_param(param):
    """Canonical type of one C parameter, which may carry a name."""
    param = ' '.join(param.split())
    m = re.match(r'^(.*?)([A-Za-z_]\w*)$', param)
    if m and m.group(1).strip() and not m.group(1).strip().endswith(('struct', 'enum', 'union')):
        head = m.group(1).strip()
        if c_type(head) is not None and (head.endswith('*') or m.group(2) not in C_SCALARS):
            return c_type(head)
    return c_type(param)


def rust_type(text):
    text = ' '.join(text.split())
    m = re.match(r'^\*\s*(mut|const)\s+(.*)$', text)
    if m:
        inner = rust_type(m.group(2))
        return None if inner is None else f'*{m.group(1)} {inner}'
    for prefix in RUST_PREFIXES:
        if text.startswith(prefix):
            text = text[len(prefix):]
    if text.startswith('bindings::') or text.startswith('kernel::bindings::'):
        return 'bindings::' + text.split('bindings::', 1)[1]
    if text in RUST_SCALARS:
        return RUST_SCALARS[text]
    if text in OWN_STRUCTS.values():
        return text
    return None


def split_top(text):
    parts, depth, cur = [], 0, ''
    for c in text:
        if c in '(<[':
            depth += 1
        elif c in ')>]':
            depth -= 1
        if c == ',' and depth == 0:
            parts.append(cur)
            cur = ''
        else:
            cur += c
    if cur.strip():
        parts.append(cur)
    return [p.strip() for p in parts if p.strip()]


def header_functions(text):
    """name -> (section implementer or 'rust', return, [params], line) from glue.h."""
    funcs = {}
    section = None
    code = strip_c(re.sub(r'/\*\s*-+\s*(.*?)\s*-+\s*\*/', lambda m: '@@SECTION ' + m.group(1) + '@@', text))
    for m in re.finditer(r'@@SECTION (.*?)@@|([^;{}#@]*?)\b(gb_\w+)\s*\(([^)]*)\)\s*;', code, flags=re.S):
        if m.group(1) is not None:
            sm = re.search(r'implemented in (?:kmod/)?([\w.]+)', m.group(1))
            section = sm.group(1) if sm else None
            continue
        ret, name, params = m.group(2), m.group(3), m.group(4)
        ret = ' '.join(ret.split())
        ret = re.sub(r'^.*\b(struct|enum)\b', r'\1', ret) if re.search(r'\b(struct|enum)\b', ret) else ret.split('\n')[-1]
        plist = [] if params.strip() in ('', 'void') else split_top(params)
        line = code.count('\n', 0, m.start(3)) + 1
        funcs[name] = (section, ret.strip(), plist, line)
    return funcs


def header_structs(text):
    structs = {}
    for m in re.finditer(r'\bstruct\s+(\w+)\s*\{([^}]*)\}\s*;', strip_c(text)):
        fields = []
        for f in m.group(2).split(';'):
            f = ' '.join(f.split())
            if f:
                fm = re.match(r'^(.*?)(\w+)$', f)
                fields.append((fm.group(2), c_type(fm.group(1))))
        structs[m.group(1)] = fields
    return structs


def rust_fn_sig(params, ret):
    plist = []
    for p in split_top(params):
        if ':' not in p:
            return None
        plist.append(rust_type(p.split(':', 1)[1]))
    r = rust_type(ret) if ret and ret.strip() else 'void'
    return r, plist


def ffi_declarations(text):
    decls = {}
    code = strip_rust_comments(text)
    for block in re.finditer(r'extern\s+"C"\s*\{(.*?)\n\}', code, flags=re.S):
        for m in re.finditer(r'fn\s+(\w+)\s*\((.*?)\)\s*(?:->\s*([^;]+))?;', block.group(1), flags=re.S):
            line = code.count('\n', 0, block.start(1) + m.start()) + 1
            decls[m.group(1)] = (rust_fn_sig(m.group(2), m.group(3)), line)
    return decls


def rust_structs(text):
    structs = {}
    code = strip_rust_comments(text)
    for m in re.finditer(r'((?:#\[[^\]]*\]\s*)*)pub\(crate\)\s+struct\s+(\w+)\s*\{(.*?)\}', code, flags=re.S):
        fields = []
        for f in split_top(m.group(3)):
            fm = re.match(r'^(?:pub(?:\([^)]*\))?\s+)?(\w+)\s*:\s*(.+)$', ' '.join(f.split()))
            if fm:
                fields.append((fm.group(1), rust_type(fm.group(2))))
        structs[m.group(2)] = ('repr(C)' in m.group(1).replace(' ', ''), fields)
    return structs


def no_mangle_fns(text):
    found = {}
    code = strip_rust_comments(text)
    for m in re.finditer(r'#\[no_mangle\]\s*(?:pub(?:\([^)]*\))?\s+)?(unsafe\s+)?extern\s+"C"\s+fn\s+(\w+)\s*\((.*?)\)\s*(?:->\s*([^{]+?))?\s*\{',
                         code, flags=re.S):
        found[m.group(2)] = (rust_fn_sig(m.group(3), m.group(4)), code.count('\n', 0, m.start()) + 1, bool(m.group(1)))
    others = len(re.findall(r'#\[no_mangle\]', code))
    return found, others


def c_definitions(text):
    """Non-static gb_* function definitions of a C file."""
    defs = set()
    for m in re.finditer(r'^([^\n;{}#]*?)\b(gb_\w+)\s*\([^;{)]*\)\s*\{', strip_c(text), flags=re.M | re.S):
        if not re.search(r'\bstatic\b', m.group(1)):
            defs.add(m.group(2))
    return defs


def fmt_sig(sig):
    if sig is None:
        return '?'
    ret, params = sig
    return f"({', '.join(p or '?' for p in params)}) -> {ret or '?'}"


def main():
    repo = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), '..'))
    kmod = os.path.join(repo, 'kmod')
    read = lambda f: open(os.path.join(kmod, f)).read()
    results = []

    def check(name, ok, detail=''):
        results.append(ok)
        print(f"{'ok  ' if ok else 'FAIL'} {name}{(': ' + detail) if detail else ''}")

    header = read('glue.h')
    hfuncs = header_functions(header)
    decls = ffi_declarations(read('glue_ffi.rs'))
    entries, entry_count = no_mangle_fns(read('entry.rs'))
    c_files = sorted(f for f in os.listdir(kmod) if f.endswith('.c'))
    c_defs = {f: c_definitions(read(f)) for f in c_files}

    stray = []
    for f in sorted(os.listdir(kmod)):
        if f.endswith('.rs') and f != 'entry.rs' and re.search(r'#\[no_mangle\]', strip_rust_comments(read(f))):
            stray.append(f)
    check('entry points only in entry.rs', not stray and entry_count == len(entries),
          ', '.join(filter(None, [stray and '#[no_mangle] in ' + ', '.join(stray),
                                  entry_count != len(entries) and 'a #[no_mangle] item in entry.rs is not an extern "C" fn'])))

    names = sorted(set(hfuncs) | set(decls) | set(entries) | {n for d in c_defs.values() for n in d})
    for name in names:
        problems = []
        h = hfuncs.get(name)
        if h is None:
            where = [w for w, present in (('glue_ffi.rs', name in decls), ('entry.rs', name in entries)) if present]
            where += [f for f, d in c_defs.items() if name in d]
            check(name, False, 'not declared in glue.h (found in ' + ', '.join(where) + ')')
            continue
        section, ret, params, line = h
        hsig = (c_type(ret), [c_param(p) for p in params])
        if hsig[0] is None or None in hsig[1]:
            problems.append(f'glue.h:{line}: a type the mapping does not know: {ret} {name}({", ".join(params)})')
        if name.startswith('gb_rs_'):
            if section != 'rust' and section != 'entry.rs':
                problems.append('declared outside the C -> Rust section of glue.h')
            if name in decls:
                problems.append('also declared in glue_ffi.rs (a C -> Rust function is defined in Rust)')
            e = entries.get(name)
            if e is None:
                problems.append('no #[no_mangle] extern "C" fn in entry.rs')
            else:
                sig, eline, is_unsafe = e
                if not is_unsafe:
                    problems.append(f'entry.rs:{eline}: not an unsafe fn')
                if sig != hsig:
                    problems.append(f'entry.rs:{eline}: {fmt_sig(sig)}, glue.h {fmt_sig(hsig)}')
            defined = [f for f, d in c_defs.items() if name in d]
            if defined:
                problems.append('defined in C: ' + ', '.join(defined))
        else:
            d = decls.get(name)
            if d is None:
                problems.append('no extern "C" declaration in glue_ffi.rs')
            elif d[0] != hsig:
                problems.append(f'glue_ffi.rs:{d[1]}: {fmt_sig(d[0])}, glue.h {fmt_sig(hsig)}')
            if name in entries:
                problems.append('also defined in entry.rs')
            defined = [f for f, dd in c_defs.items() if name in dd]
            if len(defined) != 1:
                problems.append(f"defined in {len(defined)} C files ({', '.join(defined) or 'none'})")
            elif section and defined[0] != section:
                problems.append(f'glue.h lists it under {section}, defined in {defined[0]}')
        check(name, not problems, '; '.join(problems) or fmt_sig(hsig))

    hstructs = header_structs(header)
    rstructs = rust_structs(read('glue_ffi.rs'))
    for cname in sorted(hstructs):
        rname = OWN_STRUCTS.get(cname)
        r = rstructs.get(rname)
        if r is None:
            check(f'struct {cname}', False, f'no struct {rname} in glue_ffi.rs')
            continue
        repr_c, rfields = r
        problems = []
        if not repr_c:
            problems.append(f'{rname} is not #[repr(C)]')
        if rfields != hstructs[cname]:
            problems.append(f'{rname} fields {rfields}, glue.h {hstructs[cname]}')
        check(f'struct {cname}', not problems, '; '.join(problems) or f'{rname}, {len(rfields)} fields')

    passed, failed = results.count(True), results.count(False)
    print(f'kmod-glue: {passed} passed, {failed} failed')
    return 1 if failed else 0


if __name__ == '__main__':
    sys.exit(main())
