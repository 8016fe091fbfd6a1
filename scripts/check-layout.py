#!/usr/bin/env python3
"""Checks bindgen's struct layouts against the target kernel's BTF.

The self-contained module is compiled against bindings that libclang generated in
GreenBoost's private Rust-enabled build of the distro kernel; the distro kernel itself
was built by GCC. This compares every struct/union size and byte-aligned field offset
that bindgen's layout tests assert with the BTF the distro kernel carries (made from
GCC's DWARF), and fails on any difference.

usage: check-layout.py BTF BINDINGS_RS
  BTF          a vmlinux with a .BTF section (Debian's headers ship one) or raw BTF
               such as /sys/kernel/btf/vmlinux of the running target kernel
  BINDINGS_RS  bindgen output generated with layout tests enabled
Prints one line per mismatch and a summary; exit status 1 on any mismatch.
"""
import collections
import re
import struct
import sys

BTF_MAGIC = 0xEB9F
BTF_KIND_STRUCT, BTF_KIND_UNION = 4, 5
# Bytes that follow the 12-byte `struct btf_type` for each kind, given vlen.
BTF_KIND_EXTRA = {
    1: lambda v: 4,        # INT
    3: lambda v: 12,       # ARRAY
    4: lambda v: 12 * v,   # STRUCT members
    5: lambda v: 12 * v,   # UNION members
    6: lambda v: 8 * v,    # ENUM values
    13: lambda v: 8 * v,   # FUNC_PROTO params
    14: lambda v: 4,       # VAR
    15: lambda v: 12 * v,  # DATASEC
    17: lambda v: 4,       # DECL_TAG
    19: lambda v: 12 * v,  # ENUM64 values
}


def btf_blob(path):
    data = open(path, 'rb').read()
    if struct.unpack_from('<H', data, 0)[0] == BTF_MAGIC:
        return data
    if data[:4] != b'\x7fELF' or data[4] != 2:
        sys.exit(f'{path}: neither raw BTF nor a 64-bit ELF file')
    shoff, = struct.unpack_from('<Q', data, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from('<HHH', data, 0x3a)
    sections = [struct.unpack_from('<IIQQQQIIQQ', data, shoff + i * shentsize)
                for i in range(shnum)]
    strtab_off = sections[shstrndx][4]
    for sec in sections:
        name_start = strtab_off + sec[0]
        if data[name_start:data.index(b'\0', name_start)] == b'.BTF':
            return data[sec[4]:sec[4] + sec[5]]
    sys.exit(f'{path}: no .BTF section (kernel built without CONFIG_DEBUG_INFO_BTF?)')


def btf_layouts(blob):
    """Returns ({type name: {sizes}}, {(type name, member): {byte offsets}})."""
    magic, _ver, _flags, hdr_len, type_off, type_len, str_off, str_len = \
        struct.unpack_from('<HBBIIIII', blob, 0)
    assert magic == BTF_MAGIC
    types = blob[hdr_len + type_off:hdr_len + type_off + type_len]
    strings = blob[hdr_len + str_off:hdr_len + str_off + str_len]

    def name(off):
        return strings[off:strings.index(b'\0', off)].decode()

    sizes = collections.defaultdict(set)
    offsets = collections.defaultdict(set)
    pos = 0
    while pos < len(types):
        name_off, info, size = struct.unpack_from('<III', types, pos)
        pos += 12
        vlen, kind, kflag = info & 0xffff, (info >> 24) & 0x1f, info >> 31
        if kind in (BTF_KIND_STRUCT, BTF_KIND_UNION):
            type_name = name(name_off)
            if type_name:
                sizes[type_name].add(size)
            for i in range(vlen):
                m_name, _m_type, m_off = struct.unpack_from('<III', types, pos + 12 * i)
                bit_off = (m_off & 0xffffff) if kflag else m_off
                if type_name and name(m_name) and bit_off % 8 == 0:
                    offsets[(type_name, name(m_name))].add(bit_off // 8)
        pos += BTF_KIND_EXTRA.get(kind, lambda v: 0)(vlen)
    return sizes, offsets


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    sizes, offsets = btf_layouts(btf_blob(sys.argv[1]))
    rs = open(sys.argv[2]).read()
    bg_sizes = re.findall(r'size_of::<(\w+)>\(\),\s*(\d+)usize,\s*"Size of \w+"', rs)
    bg_offsets = re.findall(
        r'addr_of!\(\(\*ptr\)\.(\w+)\) as usize - ptr as usize \},\s*(\d+)usize,'
        r'\s*"Offset of field: (\w+)::\w+"', rs)
    if not bg_sizes or not bg_offsets:
        sys.exit(f'{sys.argv[2]}: no layout tests found (bindgen run without them?)')

    compared = mismatched = 0
    for type_name, size in bg_sizes:
        if type_name not in sizes or '__bindgen' in type_name:
            continue  # anonymous or bindgen-made types have no BTF counterpart
        compared += 1
        if int(size) not in sizes[type_name]:
            mismatched += 1
            print(f'SIZE MISMATCH {type_name}: bindgen {size}, BTF {sorted(sizes[type_name])}')
    print(f'layout: {compared} struct sizes compared, {mismatched} mismatches')

    compared_off = mismatched_off = 0
    for field, off, type_name in bg_offsets:
        if (type_name, field) not in offsets:
            continue
        compared_off += 1
        if int(off) not in offsets[(type_name, field)]:
            mismatched_off += 1
            print(f'OFFSET MISMATCH {type_name}::{field}: bindgen {off}, '
                  f'BTF {sorted(offsets[(type_name, field)])}')
    print(f'layout: {compared_off} field offsets compared, {mismatched_off} mismatches')
    if compared == 0 or compared_off == 0:
        sys.exit('layout: nothing comparable between bindgen output and BTF')
    sys.exit(1 if mismatched or mismatched_off else 0)


if __name__ == '__main__':
    main()
