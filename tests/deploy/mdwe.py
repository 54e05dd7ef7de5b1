"""Run a command under systemd's `MemoryDenyWriteExecute=yes`, as the shipped unit does,
without systemd as PID 1: `python -m tests.deploy.mdwe MODE -- COMMAND...` applies the
restriction to itself and execs the command, which keeps it (both survive execve).

MODE is how systemd can apply it:
- `seccomp`: the filter systemd installs (seccomp_memory_deny_write_execute): mmap with
  PROT_WRITE and PROT_EXEC together, mprotect or pkey_mprotect adding PROT_EXEC, and shmat
  with SHM_EXEC fail with EPERM; built here with libseccomp, as systemd builds it;
- `prctl`: the kernel's own Memory-Deny-Write-Execute (prctl PR_SET_MDWE with
  PR_MDWE_REFUSE_EXEC_GAIN, Linux 6.3), which newer systemd uses where the kernel has it.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import os
import sys

PROT_WRITE = 0x2
PROT_EXEC = 0x4
SHM_EXEC = 0o100000
PR_SET_MDWE = 65
PR_MDWE_REFUSE_EXEC_GAIN = 1

SCMP_ACT_ALLOW = 0x7FFF0000
SCMP_ACT_ERRNO_BASE = 0x00050000
SCMP_CMP_MASKED_EQ = 7

# (syscall, its argument index, the bits that, all set, make the call refused)
REFUSED = (
    ("mmap", 2, PROT_WRITE | PROT_EXEC),
    ("mprotect", 2, PROT_EXEC),
    ("pkey_mprotect", 2, PROT_EXEC),
    ("shmat", 2, SHM_EXEC),
)


class ArgCompare(ctypes.Structure):
    """libseccomp's struct scmp_arg_cmp."""

    _fields_ = [
        ("arg", ctypes.c_uint),
        ("op", ctypes.c_int),
        ("datum_a", ctypes.c_uint64),
        ("datum_b", ctypes.c_uint64),
    ]


def _seccomp() -> None:
    name = ctypes.util.find_library("seccomp") or "libseccomp.so.2"
    lib = ctypes.CDLL(name, use_errno=True)
    lib.seccomp_init.restype = ctypes.c_void_p
    lib.seccomp_init.argtypes = [ctypes.c_uint32]
    lib.seccomp_syscall_resolve_name.argtypes = [ctypes.c_char_p]
    lib.seccomp_rule_add_array.argtypes = [
        ctypes.c_void_p,
        ctypes.c_uint32,
        ctypes.c_int,
        ctypes.c_uint,
        ctypes.POINTER(ArgCompare),
    ]
    lib.seccomp_load.argtypes = [ctypes.c_void_p]
    context = lib.seccomp_init(SCMP_ACT_ALLOW)
    if not context:
        raise OSError("seccomp_init failed")
    refuse = SCMP_ACT_ERRNO_BASE | errno.EPERM
    for syscall, index, bits in REFUSED:
        number = lib.seccomp_syscall_resolve_name(syscall.encode())
        compare = ArgCompare(index, SCMP_CMP_MASKED_EQ, bits, bits)
        if lib.seccomp_rule_add_array(context, refuse, number, 1, ctypes.byref(compare)) != 0:
            raise OSError(f"seccomp rule for {syscall} not added")
    # libseccomp sets no_new_privs first, as systemd does for an unprivileged service
    if lib.seccomp_load(context) != 0:
        raise OSError("seccomp_load failed")


def _prctl() -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_MDWE, PR_MDWE_REFUSE_EXEC_GAIN, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_MDWE)")


APPLY = {"seccomp": _seccomp, "prctl": _prctl}


def main(argv: list[str]) -> None:
    mode, separator, *command = argv
    if separator != "--" or mode not in APPLY or not command:
        raise SystemExit("usage: python -m tests.deploy.mdwe {seccomp|prctl} -- COMMAND...")
    APPLY[mode]()
    os.execvp(command[0], command)


if __name__ == "__main__":
    main(sys.argv[1:])
