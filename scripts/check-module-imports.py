#!/usr/bin/env python3
"""Checks that a module built for a distro kernel binds to that kernel's exports.

usage: check-module-imports.py MODULE.ko DISTRO_Module.symvers

Reads the module's __versions table (the CRC modpost recorded for each imported
symbol) and requires every entry to be exported by the distro kernel with the same
CRC: insmod would otherwise refuse it ("disagrees about version of symbol"). Also
requires that the module exports nothing, so that two modules each carrying a Rust
runtime never clash. Exit status 1 on any failure.
"""
import struct
import sys

MODVERSION_ENTRY = 64  # struct modversion_info: unsigned long crc; char name[56]


def elf_sections(data):
    if data[:4] != b'\x7fELF' or data[4] != 2:
        sys.exit('not a 64-bit ELF file')
    shoff, = struct.unpack_from('<Q', data, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from('<HHH', data, 0x3a)
    headers = [struct.unpack_from('<IIQQQQIIQQ', data, shoff + i * shentsize)
               for i in range(shnum)]
    strtab_off = headers[shstrndx][4]
    for h in headers:
        start = strtab_off + h[0]
        yield data[start:data.index(b'\0', start)].decode(), data[h[4]:h[4] + h[5]]


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    ko, symvers_path = sys.argv[1], sys.argv[2]
    sections = dict(elf_sections(open(ko, 'rb').read()))
    exported = {}
    for line in open(symvers_path):
        fields = line.split('\t')
        exported[fields[1]] = int(fields[0], 16)

    failures = []
    versions = sections.get('__versions', b'')
    if not versions:
        failures.append('no __versions section: built without the distro Module.symvers?')
    imports = 0
    for off in range(0, len(versions), MODVERSION_ENTRY):
        crc, = struct.unpack_from('<Q', versions, off)
        name = versions[off + 8:off + MODVERSION_ENTRY].split(b'\0')[0].decode()
        imports += 1
        if name not in exported:
            failures.append(f'{name}: not exported by the distro kernel')
        elif exported[name] != crc:
            failures.append(f'{name}: CRC {crc:#010x}, distro kernel has {exported[name]:#010x}')
    for name in sections:
        if name.startswith('__ksymtab'):
            failures.append(f'module exports symbols ({name})')
    for failure in failures:
        print(f'{ko}: {failure}')
    print(f'{ko}: {imports} imported symbols checked against {symvers_path}, '
          f'{len(failures)} problems')
    sys.exit(1 if failures else 0)


if __name__ == '__main__':
    main()
