"""`scripts/import-real-gpu-run DIR`: a recorded check becomes fixtures under
tests/real_gpu/<date>-<board>/, which tests/real_gpu/ replays and compares.

DIR is a check's output folder (summary.json and raw.tar.gz). The fixture keeps what the
tests need and a person reviews: each phase's NVML tape and the exposition the agent made
from it, nvidia-smi's fields read right after (where the run had nvidia-smi), the board's
static values and NotSupported set (static.json), the run's facts (meta.json) and its
summary.md. A simulated run's folder ends in -simulated, so it never passes for a board.
"""

from __future__ import annotations

import argparse
import gzip
import json
import re
import shutil
import sys
import tarfile
import tempfile
from pathlib import Path
from typing import Any

from benchmarks.real_gpu.evidence import Evidence, error, value

DEST = Path(__file__).resolve().parents[2] / "tests" / "real_gpu"
PHASES = ("idle", "load")
# raw files copied as they are (gzipped on the way when large and textual)
_KEPT = {
    "tape-{phase}.json.gz": "tape-{phase}.json.gz",
    "exposition-{phase}.prom": "exposition-{phase}.prom.gz",
    "nvidia-smi-{phase}.csv": "nvidia-smi-{phase}.csv",
}


class RunImportError(ValueError):
    """The folder is not a check's output, or the fixture exists."""


def slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-") or "unknown"


def import_run(run_dir: Path, dest: Path = DEST, force: bool = False) -> Path:
    summary_path, archive = run_dir / "summary.json", run_dir / "raw.tar.gz"
    if not summary_path.exists() or not archive.exists():
        raise RunImportError(f"{run_dir}: no summary.json and raw.tar.gz (a check's OUTDIR?)")
    summary = json.loads(summary_path.read_text())
    with tempfile.TemporaryDirectory(prefix="nvwatch-import-") as scratch:
        raw = _unpack(archive, Path(scratch))
        board = summary.get("board") or {}
        if not board.get("name"):
            raise RunImportError(f"{run_dir}: the run recorded no GPU (see its summary.md)")
        name = f"{summary['started'][:10]}-{slug(board['name'])}"
        if summary.get("simulated"):
            name += "-simulated"
        target = dest / name
        if target.exists() and not force:
            raise RunImportError(f"{target} exists (--force replaces it)")
        shutil.rmtree(target, ignore_errors=True)
        target.mkdir(parents=True)
        phases = []
        for phase in PHASES:
            if not (raw / f"tape-{phase}.json.gz").exists():
                continue
            phases.append(phase)
            for source, kept in _KEPT.items():
                path = raw / source.format(phase=phase)
                if not path.exists():
                    continue
                out = target / kept.format(phase=phase)
                if out.suffix == ".gz" and path.suffix != ".gz":
                    out.write_bytes(gzip.compress(path.read_bytes(), compresslevel=9, mtime=0))
                else:
                    shutil.copyfile(path, out)
        evidence = Evidence(raw, summary.get("simulated"), board.get("profile"))
        static = static_values(evidence)
        (target / "static.json").write_text(json.dumps(static, indent=1, sort_keys=True) + "\n")
        meta = {
            "board": board,
            "simulated": summary.get("simulated"),
            "started": summary["started"],
            "phases": phases,
            "settle_s": _settle(raw),
            "nvlink_detail": "link",
            "environment": {
                k: (summary.get("environment") or {}).get(k)
                for k in ("python", "kernel", "gvisor_likely", "dev_kmsg", "torch")
            },
            "assumptions": {a["id"]: a["verdict"] for a in summary.get("assumptions", [])},
        }
        (target / "meta.json").write_text(json.dumps(meta, indent=1, sort_keys=True) + "\n")
        if (run_dir / "summary.md").exists():
            shutil.copyfile(run_dir / "summary.md", target / "summary.md")
    return target


def _unpack(archive: Path, into: Path) -> Path:
    """raw/ of the archive: regular files only, with plain names (no links, no ..)."""
    raw = into / "raw"
    raw.mkdir()
    with tarfile.open(archive, "r:gz") as tar:
        for member in tar.getmembers():
            parts = member.name.split("/")
            if not member.isfile() or len(parts) != 2 or parts[0] != "raw":
                continue
            if not re.fullmatch(r"[A-Za-z0-9._-]+", parts[1]):
                continue
            source = tar.extractfile(member)
            if source is not None:
                (raw / parts[1]).write_bytes(source.read())
    return raw


def _settle(raw: Path) -> float:
    from benchmarks.real_gpu.tape import read_tape

    try:
        return float(read_tape(raw / "tape-idle.json.gz").get("settle", 1.0))
    except (OSError, ValueError):
        return 1.0


def static_values(ev: Evidence) -> dict[str, Any]:
    """What the board says of itself that a profile states: per GPU, and GPU 0's set of
    device queries answering NotSupported."""
    readings = ev.readings("idle") or {}
    gpus = []
    for gpu in readings.get("gpus") or []:
        v2 = value(gpu.get("memory_v2"))
        links = (gpu.get("nvlink") or {}).get("links") or []
        constraints = value(gpu.get("power_constraints_mw"))
        gpus.append(
            {
                "name": value(gpu.get("name")),
                "memory_total_bytes": int(v2["total"]) if isinstance(v2, dict) else None,
                "thresholds_c": {k: value(r) for k, r in (gpu.get("thresholds") or {}).items()},
                "max_clocks_mhz": {
                    k: value(r) for k, r in (gpu.get("max_clocks_mhz") or {}).items()
                },
                "power_default_limit_mw": value(gpu.get("power_default_limit_mw")),
                "power_limits_mw": constraints if isinstance(constraints, list) else None,
                "pcie_max": {k: value(r) for k, r in (gpu.get("pcie_max") or {}).items()},
                "nvlink_links": len(links),
                "nvlink_active": sum(1 for link in links if value(link.get("state")) == 1),
                "retired_pages": error(gpu.get("retired_pages_sbe")) or "answers",
            }
        )
    rows = ev.device_queries()
    not_supported = sorted(
        {
            str(r["fn"])
            for r in rows
            if r.get("gpu") == 0 and r.get("outcome") == "NVMLError_NotSupported"
        }
    )
    return {
        "gpus": gpus,
        "device_queries_ran": bool(rows),
        "not_supported_gpu0": not_supported,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="import-real-gpu-run", description=(__doc__ or "").split("\n", 1)[0]
    )
    parser.add_argument("run_dir", type=Path, help="the check's OUTDIR (summary.json, raw.tar.gz)")
    parser.add_argument("--dest", type=Path, default=DEST, help="default: tests/real_gpu")
    parser.add_argument("--force", action="store_true", help="replace an existing fixture")
    args = parser.parse_args(argv)
    try:
        target = import_run(args.run_dir, args.dest, args.force)
    except (RunImportError, OSError, ValueError, KeyError) as exc:
        print(f"import-real-gpu-run: error: {exc}", file=sys.stderr)
        return 2
    print(target)
    return 0


if __name__ == "__main__":
    sys.exit(main())
