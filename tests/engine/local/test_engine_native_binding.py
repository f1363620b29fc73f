"""The ctypes binding of the native kernels (engine/local/native.py's PROTOTYPES) against the C
declarations in engine/local/native/tokenwire.h and pool.h: every exported function, its argument
names in order, and each argument's and result's type. The compiler holds the definitions to the
headers (every source includes tokenwire.h; a function they export that no header declares fails
-Werror=missing-prototypes below), so a C signature that changes without the table fails here."""

from __future__ import annotations

import ctypes
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from engine.local import native

DECLARATION = re.compile(r"^\s*([A-Za-z_][\w\s]*?[\s*])(tw_\w+)\s*\(([^)]*)\)\s*;", re.M)
C_TYPES: dict[str, Any] = {"int64_t": ctypes.c_int64, "int": ctypes.c_int, "float": ctypes.c_float, "void": None,
                           "tw_task": native.TASK}


def _ctype(text: str) -> Any:
    words = text.replace("const", " ").replace("*", " * ").split()
    if "*" in words:
        return ctypes.c_void_p  # any data pointer is passed as an address (tensor.data_ptr())
    (name,) = words
    return C_TYPES[name]


def declarations(text: str) -> dict[str, tuple[Any, tuple[tuple[str, Any], ...]]]:
    """``name -> (result type, ((argument, type), ...))`` of every ``tw_*`` function ``text`` declares."""
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    found: dict[str, tuple[Any, tuple[tuple[str, Any], ...]]] = {}
    for result, name, params in DECLARATION.findall(text):
        args: list[tuple[str, Any]] = []
        if params.strip() != "void":
            for param in params.split(","):
                match = re.fullmatch(r"\s*(.*?[\s*])(\w+)\s*", param)
                assert match, f"{name}: cannot read the parameter {param!r}"
                args.append((match.group(2), _ctype(match.group(1))))
        found[name] = (_ctype(result), tuple(args))
    return found


def _headers() -> dict[str, tuple[Any, tuple[tuple[str, Any], ...]]]:
    found: dict[str, tuple[Any, tuple[tuple[str, Any], ...]]] = {}
    for header in native.HEADERS:
        found |= declarations(header.read_text())
    return found


def test_the_ctypes_table_is_the_headers_declarations_names_and_types() -> None:
    headers = _headers()
    assert sorted(headers) == sorted(native.PROTOTYPES)
    for name, (result, args) in native.PROTOTYPES.items():
        assert headers[name] == (result, args), name


def test_the_reader_sees_a_changed_signature() -> None:
    # the check above can fail: an argument added, renamed or retyped is a different declaration
    good = "int tw_f(int64_t a, const uint16_t *p, float s);"
    assert declarations(good) == {"tw_f": (ctypes.c_int, (("a", ctypes.c_int64), ("p", ctypes.c_void_p),
                                                          ("s", ctypes.c_float)))}
    for bad in ("int tw_f(int64_t a, const uint16_t *p, float s, int64_t t);", "int tw_f(int64_t b, void *p, float s);",
                "int tw_f(int64_t a, const uint16_t *p, int64_t s);", "void tw_f(int64_t a, const uint16_t *p, float s);"):
        assert declarations(bad) != declarations(good), bad
    assert declarations("/* int tw_g(void); */ void tw_h(void);") == {"tw_h": (None, ())}


def test_every_exported_function_is_declared_in_a_header(tmp_path: Path) -> None:
    compiler = shutil.which("cc")
    if compiler is None:
        pytest.skip("no C compiler")
    for source in native.SOURCES:
        done = subprocess.run([compiler, "-fsyntax-only", "-Werror=missing-prototypes", "-fopenmp-simd", "-pthread",
                               str(source)], capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
    # and the check has teeth: an exported function without a declaration fails it
    stray = tmp_path / "stray.c"
    stray.write_text('#include "tokenwire.h"\nint tw_stray(int64_t x) { return (int)x; }\n')
    done = subprocess.run([compiler, "-fsyntax-only", "-Werror=missing-prototypes", f"-I{native.NATIVE}", str(stray)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode != 0 and "tw_stray" in done.stderr


def test_a_built_library_has_every_function_of_the_table_typed(tmp_path: Path) -> None:
    loaded = native.load(tmp_path)
    assert loaded.library is not None, loaded.detail  # the test machine has a C compiler (scripts/install.sh)
    lib = native.bind(loaded.library.path)
    for name, (result, args) in native.PROTOTYPES.items():
        fn = getattr(lib, name)
        assert fn.restype is result and fn.argtypes == [kind for _, kind in args], name
    # ctypes now refuses a call with an argument missing, where an untyped call would pass garbage
    with pytest.raises(TypeError):
        lib.tw_linear_packed_size(64)
