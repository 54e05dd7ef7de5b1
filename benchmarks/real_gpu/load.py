"""Load for the check: a bf16 matrix-multiply loop and host-to-device copies on GPU 0.

    python -m benchmarks.real_gpu.load --seconds 30 --out load.json

With the image's PyTorch: utilization, power, clocks, PCIe (the copies come from pinned
host memory) and energy should all move while it runs. It stops by itself after
--seconds or on SIGTERM (checked every iteration, and every iteration is bounded: four
products and one copy, then a synchronisation), and writes what it did: the products'
rate, the bytes copied and the copy rate, the start and end times. Exit 3 without
PyTorch or CUDA.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

NO_TORCH = 3
# set by SIGTERM: the check stops the load once its recording is done
STOP = threading.Event()


def run(seconds: float, size: int, copy_mib: int) -> dict[str, Any]:
    import torch

    if not torch.cuda.is_available():
        raise RuntimeError("PyTorch sees no CUDA device")
    device = torch.device("cuda:0")
    a = torch.randn(size, size, device=device, dtype=torch.bfloat16)
    b = torch.randn(size, size, device=device, dtype=torch.bfloat16)
    host = torch.empty(copy_mib * 1024 * 1024, dtype=torch.uint8).pin_memory()
    target = torch.empty_like(host, device=device)
    copies = torch.cuda.Stream(device)
    torch.cuda.synchronize(device)
    started = time.time()
    deadline = time.monotonic() + seconds
    products = copied = iterations = 0
    while time.monotonic() < deadline and iterations < 10_000_000 and not STOP.is_set():
        with torch.cuda.stream(copies):
            target.copy_(host, non_blocking=True)
        for _ in range(4):
            torch.matmul(a, b)
        torch.cuda.synchronize(device)
        products += 4
        copied += host.numel()
        iterations += 1
    ended = time.time()
    elapsed = ended - started
    return {
        "device": torch.cuda.get_device_name(device),
        "torch": torch.__version__,
        "started": started,
        "ended": ended,
        "seconds": elapsed,
        "matmul_size": size,
        "products": products,
        "tflops": 2 * size**3 * products / elapsed / 1e12 if elapsed else None,
        "h2d_bytes": copied,
        "h2d_bytes_per_second": copied / elapsed if elapsed else None,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="load", description=__doc__.split("\n", 1)[0])
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--size", type=int, default=8192)
    parser.add_argument("--copy-mib", type=int, default=256)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    signal.signal(signal.SIGTERM, lambda _signum, _frame: STOP.set())
    try:
        import torch  # noqa: F401
    except ImportError as exc:
        args.out.write_text(json.dumps({"error": f"PyTorch not importable: {exc}"}) + "\n")
        return NO_TORCH
    try:
        result = run(args.seconds, args.size, args.copy_mib)
    except RuntimeError as exc:
        args.out.write_text(json.dumps({"error": str(exc)}) + "\n")
        return NO_TORCH
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
