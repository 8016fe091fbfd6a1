"""greenboost.zerocopy against abi/greenboost.h: every struct size, field offset, ioctl
number and constant the Python module uses is compared with what the C compiler makes of
the header (the header is in turn checked against the Rust ABI crate by abi/tests/header.rs)."""

import os
import shutil
import subprocess
import tempfile

import pytest

import greenboost.zerocopy as gz

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CONSTANTS = {
    "GB_ABI_VERSION": gz.ABI_VERSION,
    "GB_CHUNK_SIZE": gz.CHUNK_SIZE,
    "GB_ALLOC_NODE_STRICT": gz.ALLOC_NODE_STRICT,
    "GB_ALLOC_T3": gz.ALLOC_T3,
    "GB_INFO_T3": gz.INFO_T3,
    "GB_TIER_T2": gz.TIER_T2,
    "GB_TIER_T3": gz.TIER_T3,
}


def c_layout():
    """{(kind, name): value} printed by a C program compiled against the header."""
    compiler = shutil.which("cc") or shutil.which("gcc")
    if not compiler:
        raise RuntimeError("no C compiler (cc/gcc) to compile abi/greenboost.h")
    lines = ['#include <stdio.h>', '#include <stddef.h>', '#include "greenboost.h"', "int main(void) {"]
    for name, fields in gz.STRUCTS.items():
        lines.append(f'printf("size {name} %zu\\n", sizeof(struct {name}));')
        for field, _ in fields:
            lines.append(f'printf("offset {name}.{field} %zu\\n", offsetof(struct {name}, {field}));')
    for name in gz.IOCTLS:
        lines.append(f'printf("ioctl {name} %lu\\n", (unsigned long){name});')
    for name in CONSTANTS:
        lines.append(f'printf("const {name} %lu\\n", (unsigned long){name});')
    lines.append('printf("path GB_DEVICE_PATH %s\\n", GB_DEVICE_PATH);')
    lines.append("return 0; }")
    with tempfile.TemporaryDirectory() as tmp:
        source = os.path.join(tmp, "layout.c")
        binary = os.path.join(tmp, "layout")
        with open(source, "w") as f:
            f.write("\n".join(lines) + "\n")
        compiled = subprocess.run([compiler, "-Wall", "-Werror", "-I", os.path.join(ROOT, "abi"), source, "-o", binary],
                                  capture_output=True, text=True)
        if compiled.returncode != 0:
            return None, compiled.stderr
        output = subprocess.run([binary], check=True, capture_output=True, text=True).stdout
    table = {}
    for line in output.splitlines():
        kind, key, value = line.split(" ", 2)
        table[(kind, key)] = value
    return table, ""


@pytest.fixture(scope="module")
def compiled():
    return c_layout()


@pytest.fixture(scope="module")
def c_table(compiled):
    table, errors = compiled
    if table is None:
        pytest.fail(f"abi/greenboost.h does not compile with the fields this module names: {errors}")
    return table


def test_header_compiles_with_every_field_this_module_names(compiled):
    table, errors = compiled
    assert table is not None, errors


@pytest.mark.parametrize("name", list(gz.STRUCTS))
def test_struct_size_matches(c_table, name):
    assert int(c_table[("size", name)]) == gz.LAYOUTS[name].size, f"C {c_table[('size', name)]} Python {gz.LAYOUTS[name].size}"


@pytest.mark.parametrize("name", list(gz.STRUCTS))
def test_struct_field_offsets_match(c_table, name):
    offsets = gz.field_offsets(name)
    wrong = [f for f, _ in gz.STRUCTS[name] if int(c_table[("offset", f"{name}.{f}")]) != offsets[f]]
    assert not wrong, f"offsets differ: {wrong}"


@pytest.mark.parametrize("name", list(gz.IOCTLS))
def test_ioctl_number_matches(c_table, name):
    number = gz.IOCTLS[name]
    assert int(c_table[("ioctl", name)]) == number, f"C {int(c_table[('ioctl', name)]):#x} Python {number:#x}"


@pytest.mark.parametrize("name", list(CONSTANTS))
def test_constant_matches(c_table, name):
    assert int(c_table[("const", name)]) == CONSTANTS[name], f"C {c_table[('const', name)]} Python {CONSTANTS[name]}"


def test_device_path_matches(c_table):
    assert c_table[("path", "GB_DEVICE_PATH")] == gz.DEVICE_PATH
