"""The SPANK plugin as built: only the SPANK entry points exported, hardened, loadable.

Runs `make -C spank` (as `make cluster` does); needs gcc, binutils and libslurm-dev.
"""

from __future__ import annotations

import ctypes
import os
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PLUGIN = REPO / "spank" / "arnold_rankfile.so"
LIBSLURM = Path("/usr/lib/x86_64-linux-gnu/libslurm.so")
EXPORTS = {"plugin_name", "plugin_type", "plugin_version", "spank_plugin_version",
           "slurm_spank_init", "slurm_spank_task_init"}


@pytest.fixture(scope="module")
def plugin() -> Path:
    proc = subprocess.run(["make", "-s", "-C", str(REPO / "spank"), "arnold_rankfile.so"],
                          capture_output=True, text=True)
    if proc.returncode and "slurm/spank.h" in proc.stderr:
        pytest.skip("no Slurm headers: apt-get install libslurm-dev")
    assert proc.returncode == 0, proc.stderr
    return PLUGIN


def _out(*cmd: str) -> str:
    return subprocess.run(cmd, capture_output=True, text=True, check=True).stdout


def test_only_the_spank_entry_points_are_exported(plugin: Path) -> None:
    defined = {line.split()[-1] for line in _out("nm", "-D", "--defined-only",
                                                  str(plugin)).splitlines()}
    assert defined == EXPORTS


def test_built_with_hardening(plugin: Path) -> None:
    dynamic = _out("readelf", "-d", str(plugin))
    assert "BIND_NOW" in dynamic  # -z now: the GOT is resolved at load...
    segments = _out("readelf", "-lW", str(plugin))
    assert "GNU_RELRO" in segments  # ...and made read-only (-z relro)
    stack = next(line for line in segments.splitlines() if "GNU_STACK" in line)
    assert "RWE" not in stack  # no executable stack
    imports = _out("nm", "-D", "--undefined-only", str(plugin))
    assert "__stack_chk_fail" in imports  # -fstack-protector-strong
    assert "_chk@" in imports.replace("__stack_chk_fail@", "")  # _FORTIFY_SOURCE=2


# The SPANK functions slurmstepd gives a plugin, with spank.h's own signatures (a shim: the
# real host is slurmstepd, which the live tests use; here only loading is checked).
SHIM = """
#include <slurm/spank.h>
#define UNUSED(x) (void)(x)
spank_err_t spank_get_item(spank_t s, spank_item_t i, ...)
{ UNUSED(s); UNUSED(i); return ESPANK_ERROR; }
spank_err_t spank_getenv(spank_t s, const char *v, char *b, int n)
{ UNUSED(s); UNUSED(v); UNUSED(b); UNUSED(n); return ESPANK_ENV_NOEXIST; }
spank_err_t spank_setenv(spank_t s, const char *v, const char *x, int o)
{ UNUSED(s); UNUSED(v); UNUSED(x); UNUSED(o); return ESPANK_SUCCESS; }
spank_err_t spank_option_register(spank_t s, struct spank_option *o)
{ UNUSED(s); UNUSED(o); return ESPANK_SUCCESS; }
int spank_remote(spank_t s) { UNUSED(s); return 1; }
spank_context_t spank_context(void) { return S_CTX_REMOTE; }
"""
ALLOWED_SLURM = {"spank_get_item", "spank_getenv", "spank_setenv", "spank_option_register",
                 "spank_remote", "spank_context", "slurm_error"}


def test_imports_only_libc_and_the_spank_api(plugin: Path) -> None:
    imports = {line.split()[-1] for line in _out("nm", "-D", "--undefined-only",
                                                  str(plugin)).splitlines()}
    assert {name for name in imports if "@GLIBC" not in name
            and not name.startswith(("_ITM_", "__gmon_start__"))} <= ALLOWED_SLURM


def test_dlopen_resolves_every_symbol_and_identifies_the_plugin(plugin: Path,
                                                                tmp_path: Path) -> None:
    if not LIBSLURM.exists():
        pytest.skip(f"{LIBSLURM} missing: apt-get install libslurm-dev")
    shim = tmp_path / "libspankshim.so"
    source = tmp_path / "shim.c"
    source.write_text(SHIM)
    subprocess.run(["gcc", "-shared", "-fPIC", "-Wall", "-Werror", "-o", str(shim), str(source)],
                   check=True)
    ctypes.CDLL(str(LIBSLURM), mode=os.RTLD_GLOBAL | os.RTLD_NOW)  # slurm_error
    ctypes.CDLL(str(shim), mode=os.RTLD_GLOBAL | os.RTLD_NOW)
    # BIND_NOW: any symbol nobody provides fails the dlopen itself.
    lib = ctypes.CDLL(str(plugin), mode=os.RTLD_NOW | os.RTLD_LOCAL)
    for name in EXPORTS:
        assert getattr(lib, name) is not None
    ident = ctypes.cast(ctypes.addressof(ctypes.c_char.in_dll(lib, "plugin_name")),
                        ctypes.c_char_p).value  # a char array, not a pointer
    assert ident == b"arnold_rankfile"
    with pytest.raises(AttributeError):
        getattr(lib, "arnold_rankorder_lookup")  # noqa: B009 - the parser stays private
