"""Record every NVML C call a piece of code makes, and play the answers back later.

pynvml finds each C function with `getattr(pynvml.nvmlLib, name)`, and the simulator
already sits there; so does the recorder. `record_calls()` puts a `RecordingLib` in front
of whatever library is loaded (the real libnvidia-ml, or the simulated one), and each call
made on the recording thread is kept: the function, its arguments (handles by address,
by-value numbers, and every out-parameter's bytes after the call), the return code and
the wall time. The agent's own shortcuts below pynvml's wrappers (the field batch, the
process utilization buffer) go through the same attribute, so nothing escapes the tape.

`ReplayLib` answers from a tape: the same function with the same arguments gets the
recorded out-bytes written into its out-parameters and the recorded return code, in the
recorded order (the last answer again once they run out); a call with a "since"
timestamp argument matches on its handle alone. Handles come back as the
addresses they had, so later calls that pass them match. Field-value batches are
answered entry by entry from the recorded entries of the same (GPU, field, scope), so a
batch asked in another order or size still replays. A call the tape lacks is answered
NotSupported and listed in `misses`; a function it never saw is missing from the library
(pynvml raises FunctionNotFound), as on an older driver.
"""

from __future__ import annotations

import contextlib
import ctypes
import gzip
import json
import threading
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pynvml

FORMAT = 1
NOT_SUPPORTED: int = pynvml.NVML_ERROR_NOT_SUPPORTED
FIELD_VALUES = "nvmlDeviceGetFieldValues"
# functions whose answer is not an nvmlReturn_t (pynvml sets .restype on them): passed
# through unrecorded, answered from a table on replay
_NOT_RECORDED = frozenset({"nvmlErrorString"})
# functions with a "since" timestamp argument, which differs from run to run: replayed by
# handle and order when the exact arguments miss
_TIMESTAMPED = frozenset(
    {
        "nvmlDeviceGetProcessUtilization",
        "nvmlDeviceGetSamples",
        "nvmlDeviceGetVgpuUtilization",
        "nvmlDeviceGetVgpuProcessUtilization",
    }
)
_ENTRY = pynvml.c_nvmlFieldValue_t
_ENTRY_SIZE = ctypes.sizeof(_ENTRY)

Call = dict[str, Any]


# --- describing ctypes arguments ---------------------------------------------------------


def _raw(obj: Any) -> bytes:
    return ctypes.string_at(ctypes.addressof(obj), ctypes.sizeof(obj))


def _address(pointer: Any) -> int:
    value = ctypes.cast(pointer, ctypes.c_void_p).value
    return int(value) if value is not None else 0


def _type_name(obj: Any) -> tuple[str, int | None]:
    """(element type name, length) for arrays; (type name, None) otherwise."""
    if isinstance(obj, ctypes.Array):
        return obj._type_.__name__, len(obj)
    return type(obj).__name__, None


def _target(arg: Any) -> Any | None:
    """The ctypes object an argument lets the callee write into, or None for inputs."""
    if type(arg).__name__ == "CArgObject":  # byref(obj)
        return arg._obj
    if isinstance(arg, ctypes._Pointer):
        # an opaque handle (device, event set, GPM sample) is an input; pointer(obj) is not
        return None if ctypes.sizeof(arg._type_) == 0 else arg.contents
    if isinstance(arg, ctypes.Array | ctypes.Structure | ctypes.Union):
        return arg
    return None


def describe(arg: Any) -> dict[str, Any]:
    """One argument as JSON: {"v"} a number, {"s"} bytes in hex, {"p"} a handle's address,
    {"o", "n"?, "iv"?} an out-parameter (its type, array length, input number)."""
    if arg is None or isinstance(arg, bool | int | float):
        return {"v": arg}
    if isinstance(arg, bytes | str):
        return {"s": (arg.encode() if isinstance(arg, str) else arg).hex()}
    target = _target(arg)
    if target is not None:
        name, length = _type_name(target)
        desc: dict[str, Any] = {"o": name}
        if length is not None:
            desc["n"] = length
        value = getattr(target, "value", None)
        if isinstance(target, ctypes._SimpleCData) and isinstance(value, int):
            desc["iv"] = value  # an in/out count (the size negotiation of list calls)
        return desc
    if isinstance(arg, ctypes._Pointer | ctypes.c_void_p):
        return {"p": _address(arg)}
    if isinstance(arg, ctypes.c_char_p):
        return {"s": (arg.value or b"").hex()}
    if isinstance(arg, ctypes._SimpleCData):
        return {"v": arg.value}
    return {"?": type(arg).__name__}


def call_key(fn: str, args: list[dict[str, Any]], loose: bool = False) -> str:
    """The replay key of a call: handles and out-types always; numbers unless `loose`
    (for the functions whose "since" timestamp differs per run)."""
    parts: list[Any] = [fn]
    for desc in args:
        if "p" in desc:
            parts.append(["p", desc["p"]])
        elif "o" in desc:
            parts.append(["o", desc["o"], desc.get("n"), None if loose else desc.get("iv")])
        elif loose:
            parts.append("*")
        else:
            parts.append(["v", desc.get("v", desc.get("s"))])
    return json.dumps(parts)


# --- recording ---------------------------------------------------------------------------


@dataclass
class Recorder:
    """What the recording library keeps. `mode`: "off", "record" (whole calls) or
    "time" (only each function's wall time); only `thread`'s calls count."""

    mode: str = "off"
    phase: str = ""
    thread: int | None = None
    calls: list[Call] = field(default_factory=list)
    timings: dict[str, list[float]] = field(default_factory=dict)

    def wants(self) -> bool:
        return self.mode != "off" and threading.get_ident() == self.thread


class _RecordedFunction:
    def __init__(self, name: str, fn: Any, recorder: Recorder) -> None:
        self.__name__ = name
        self._fn = fn
        self._recorder = recorder

    def __call__(self, *args: Any) -> Any:
        recorder = self._recorder
        if not recorder.wants():
            return self._fn(*args)
        described = [describe(a) for a in args] if recorder.mode == "record" else []
        started = time.perf_counter_ns()
        ret = self._fn(*args)
        micros = (time.perf_counter_ns() - started) / 1000
        recorder.timings.setdefault(self.__name__, []).append(micros)
        if recorder.mode == "record":
            for arg, desc in zip(args, described, strict=True):
                if "o" in desc:
                    desc["out"] = _raw(_target(arg)).hex()
            recorder.calls.append(
                {
                    "fn": self.__name__,
                    "args": described,
                    "ret": ret if isinstance(ret, int) else None,
                    "us": round(micros, 2),
                    "phase": recorder.phase,
                }
            )
        return ret


class RecordingLib:
    """Stands in front of a loaded NVML library (real or simulated) as pynvml.nvmlLib."""

    def __init__(self, lib: object, recorder: Recorder) -> None:
        self._lib = lib
        self._recorder = recorder

    def __getattr__(self, name: str) -> Any:
        fn = getattr(self._lib, name)  # AttributeError: pynvml's FunctionNotFound
        if not name.startswith("nvml") or name in _NOT_RECORDED:
            return fn
        return _RecordedFunction(name, fn, self._recorder)


def _swap_library(lib: object | None) -> None:
    with pynvml.libLoadLock:
        pynvml.nvmlLib = lib
        pynvml._nvmlGetFunctionPointer_cache.clear()


@contextlib.contextmanager
def record_calls(recorder: Recorder) -> Iterator[Recorder]:
    """The recorder in front of the loaded library (loaded here if it is not yet) for the
    block; the calling thread is the one recorded. Raises NVMLError without a library."""
    pynvml._LoadNvmlLibrary()
    loaded = pynvml.nvmlLib
    recorder.thread = threading.get_ident()
    _swap_library(RecordingLib(loaded, recorder))
    try:
        yield recorder
    finally:
        _swap_library(loaded)


def tape_document(recorder: Recorder, **meta: Any) -> dict[str, Any]:
    return {"format": FORMAT, "pynvml": _pynvml_version(), **meta, "calls": recorder.calls}


def _pynvml_version() -> str:
    from importlib import metadata

    try:
        return metadata.version("nvidia-ml-py")
    except metadata.PackageNotFoundError:
        return "unknown"


def write_tape(path: Path, document: Mapping[str, Any]) -> None:
    """A tape as gzipped JSON (a field batch is a few KiB of hex per GPU and poll)."""
    data = json.dumps(document, separators=(",", ":")).encode()
    path.write_bytes(gzip.compress(data, compresslevel=9, mtime=0))


def read_tape(path: Path) -> dict[str, Any]:
    document: dict[str, Any] = json.loads(gzip.decompress(path.read_bytes()))
    if document.get("format") != FORMAT:
        raise ValueError(f"{path}: tape format {document.get('format')!r}, expected {FORMAT}")
    return document


# --- decoding what a call wrote ----------------------------------------------------------


def ctype_of(name: str) -> Any | None:
    """A ctypes type by the name a tape gives it (pynvml's structs, ctypes' scalars)."""
    found = getattr(pynvml, name, None) or getattr(ctypes, name, None)
    return found if isinstance(found, type) else None


def decoded(desc: Mapping[str, Any]) -> Any | None:
    """The out-parameter `desc` as a ctypes object (an array for arrays), or None when the
    type is unknown to this pynvml."""
    kind = ctype_of(desc["o"])
    if kind is None or "out" not in desc:
        return None
    if desc.get("n") is not None:
        kind = kind * int(desc["n"])
    data = bytes.fromhex(desc["out"])
    if len(data) != ctypes.sizeof(kind):
        return None
    return kind.from_buffer_copy(data)


def handle_of(desc: Mapping[str, Any]) -> int:
    """The address a pointer-typed out-parameter (a handle just obtained) holds."""
    return int.from_bytes(bytes.fromhex(desc["out"])[:8], "little")


def field_entries(call: Call) -> list[Any]:
    """The c_nvmlFieldValue_t entries a recorded field batch answered."""
    out = next((d for d in call["args"] if d.get("o") == _ENTRY.__name__), None)
    if out is None:
        return []
    data = bytes.fromhex(out["out"])
    return [
        _ENTRY.from_buffer_copy(data[i : i + _ENTRY_SIZE])
        for i in range(0, len(data) - _ENTRY_SIZE + 1, _ENTRY_SIZE)
    ]


# --- replaying ---------------------------------------------------------------------------


class ReplayLib:
    """An NVML library that answers from a tape (see the module docstring)."""

    def __init__(self, calls: list[Call]) -> None:
        self._lock = threading.Lock()
        self._exact: dict[str, list[Call]] = {}
        self._loose: dict[str, list[Call]] = {}
        self._used: dict[str, int] = {}
        self._entries: dict[tuple[int, int, int], list[bytes]] = {}
        self._entry_used: dict[tuple[int, int, int], int] = {}
        self._names = {call["fn"] for call in calls} | set(_NOT_RECORDED)
        self.misses: list[str] = []
        for call in calls:
            if call["fn"] == FIELD_VALUES:
                self._index_entries(call)
                continue
            self._exact.setdefault(call_key(call["fn"], call["args"]), []).append(call)
            self._loose.setdefault(call_key(call["fn"], call["args"], True), []).append(call)

    def _index_entries(self, call: Call) -> None:
        handle = next((d["p"] for d in call["args"] if "p" in d), 0)
        out = next((d for d in call["args"] if d.get("o") == _ENTRY.__name__), None)
        if out is None:
            return
        data = bytes.fromhex(out["out"])
        for i in range(0, len(data) - _ENTRY_SIZE + 1, _ENTRY_SIZE):
            chunk = data[i : i + _ENTRY_SIZE]
            entry = _ENTRY.from_buffer_copy(chunk)
            self._entries.setdefault((handle, entry.fieldId, entry.scopeId), []).append(chunk)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_") or name not in self._names:
            raise AttributeError(name)
        if name == "nvmlErrorString":
            return _error_string
        if name == FIELD_VALUES:
            return self._field_values

        def answer(*args: Any) -> int:
            return self._answer(name, args)

        answer.__name__ = name
        return answer

    def _next(self, table: dict[str, list[Call]], key: str) -> Call | None:
        calls = table.get(key)
        if not calls:
            return None
        used = self._used.get(key, 0)
        self._used[key] = used + 1
        return calls[min(used, len(calls) - 1)]

    def _answer(self, name: str, args: tuple[Any, ...]) -> int:
        described = [describe(a) for a in args]
        with self._lock:
            call = self._next(self._exact, call_key(name, described))
            if call is None and name in _TIMESTAMPED:
                call = self._next(self._loose, call_key(name, described, True))
            if call is None:
                self.misses.append(call_key(name, described))
                return NOT_SUPPORTED
        for arg, desc in zip(args, call["args"], strict=False):
            if "out" in desc:
                target = _target(arg)
                if target is not None:
                    data = bytes.fromhex(desc["out"])
                    ctypes.memmove(
                        ctypes.addressof(target), data, min(len(data), ctypes.sizeof(target))
                    )
        ret = call["ret"]
        return int(ret) if ret is not None else NOT_SUPPORTED

    def _field_values(self, handle: Any, count: Any, values: Any) -> int:
        address = describe(handle).get("p", 0)
        target = _target(values)
        if target is None:
            return int(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        n = int(getattr(count, "value", count))
        with self._lock:
            for i in range(n):
                offset = i * _ENTRY_SIZE
                entry = _ENTRY.from_buffer(target, offset)
                key = (address, int(entry.fieldId), int(entry.scopeId))
                recorded = self._entries.get(key)
                if not recorded:
                    self.misses.append(f"{FIELD_VALUES} field {key[1]} scope {key[2]}")
                    entry.nvmlReturn = NOT_SUPPORTED
                    continue
                used = self._entry_used.get(key, 0)
                self._entry_used[key] = used + 1
                chunk = recorded[min(used, len(recorded) - 1)]
                ctypes.memmove(ctypes.addressof(target) + offset, chunk, _ENTRY_SIZE)
        return int(pynvml.NVML_SUCCESS)


def _error_string(code: Any) -> bytes:
    return f"NVML error {int(getattr(code, 'value', code))} (replayed)".encode()


@contextlib.contextmanager
def replaying(calls: list[Call]) -> Iterator[ReplayLib]:
    """pynvml answered from `calls` for the block; the library slot is emptied after."""
    lib = ReplayLib(calls)
    _swap_library(lib)
    try:
        yield lib
    finally:
        _swap_library(None)
        pynvml._nvmlLib_refcount = 0
