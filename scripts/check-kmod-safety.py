#!/usr/bin/env python3
"""Checks that every `unsafe` in kmod/*.rs says why it is sound.

usage: check-kmod-safety.py [REPO_ROOT]

  unsafe { ... }   a `// SAFETY:` comment right above the statement, field, argument
                   or match arm that contains the block (only lines of the same
                   statement in between), or on the block's own line
  unsafe impl      a `// SAFETY:` comment right above it (attributes in between are
                   fine)
  unsafe fn        (including `unsafe extern "C" fn`) a `# Safety` section in its doc
                   comment

A SAFETY comment must give a reason: one that is only "as above", "see above" or
"same as above" fails. Prints one line per failure and `kmod-safety: N passed, M
failed` (one check per unsafe); exit status 1 on any failure. Python 3, no deps.
"""
import os
import re
import sys

LAZY = re.compile(r'SAFETY:\s*(?:(?:the\s+)?same\s+as\s+above|as\s+above|see\s+above)\s*\.?\s*$', re.I)


def code_of(line):
    """The line without its // comment and string contents (roughly)."""
    line = re.sub(r'"(?:\\.|[^"\\])*"', '""', line)
    return line.split('//', 1)[0]


def comment_block_above(lines, i):
    """The // comment lines directly above line i (skipping attributes)."""
    j = i - 1
    while j >= 0 and lines[j].strip().startswith('#['):
        j -= 1
    block = []
    while j >= 0 and lines[j].strip().startswith('//'):
        block.insert(0, lines[j].strip())
        j -= 1
    return block, j


def safety_reason(block):
    """The text of the SAFETY comment in a block of // lines, or None."""
    for k, line in enumerate(block):
        if 'SAFETY:' in line:
            text = ' '.join(l.lstrip('/').strip() for l in block[k:])
            return text
    return None


def check_block(lines, i):
    line = lines[i]
    before = line[:line.find('unsafe')]
    if '// SAFETY:' in before:
        return None
    j = i
    # Walk up over the lines of the same statement until a comment block.
    while True:
        block, top = comment_block_above(lines, j)
        reason = safety_reason(block)
        if reason is not None:
            return 'lazy' if LAZY.search(reason) else None
        if block:
            return 'missing'
        if top < 0:
            return 'missing'
        prev = code_of(lines[top]).rstrip()
        if not prev or prev.endswith((';', '{', '}', ',', '=>')):
            return 'missing'
        j = top


def main():
    repo = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), '..'))
    kmod = os.path.join(repo, 'kmod')
    passed = failed = 0
    for f in sorted(os.listdir(kmod)):
        if not f.endswith('.rs'):
            continue
        lines = open(os.path.join(kmod, f)).read().split('\n')
        for i, line in enumerate(lines):
            code = code_of(line)
            for m in re.finditer(r'\bunsafe\b\s*(\{|impl\b|fn\b|extern\s*(?:"[^"]*")?\s*fn\b)?', code):
                kind = m.group(1)
                if kind is None:
                    # `unsafe` at the end of a line: look at what follows.
                    rest = ''.join(code_of(l) for l in lines[i + 1:i + 2]).lstrip()
                    kind = '{' if rest.startswith('{') else 'fn' if rest.startswith(('fn', 'extern')) else None
                    if kind is None:
                        continue
                where = f'{f}:{i + 1}'
                problem = None
                if kind == '{':
                    problem = check_block(lines, i)
                    what = 'unsafe block'
                elif kind.startswith('impl'):
                    block, _ = comment_block_above(lines, i)
                    reason = safety_reason(block)
                    problem = 'missing' if reason is None else 'lazy' if LAZY.search(reason) else None
                    what = 'unsafe impl'
                else:
                    j = i - 1
                    while j >= 0 and lines[j].strip().startswith('#['):
                        j -= 1
                    doc = []
                    while j >= 0 and lines[j].strip().startswith('///'):
                        doc.insert(0, lines[j].strip())
                        j -= 1
                    problem = None if any(re.match(r'///\s*#\s*Safety\b', d) for d in doc) else 'no # Safety'
                    what = 'unsafe fn'
                if problem is None:
                    passed += 1
                else:
                    failed += 1
                    msg = {'missing': 'no // SAFETY: comment', 'lazy': 'SAFETY comment gives no reason ("as above")',
                           'no # Safety': 'no # Safety section in its doc comment'}[problem]
                    print(f'FAIL {where}: {what}: {msg}')
    print(f'kmod-safety: {passed} passed, {failed} failed')
    return 1 if failed else 0


if __name__ == '__main__':
    sys.exit(main())
