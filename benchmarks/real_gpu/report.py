"""summary.json and summary.md of a check, and raw.tar.gz of everything it wrote."""

from __future__ import annotations

import json
import time
from dataclasses import asdict
from typing import TYPE_CHECKING, Any

from benchmarks.real_gpu.assumptions import settle
from benchmarks.real_gpu.evidence import Evidence, value
from benchmarks.real_gpu.expectations import expected, judge, not_supported_calls, samples_of

if TYPE_CHECKING:
    from benchmarks.real_gpu.check import Run

FORMAT = 1
ARCHIVE = "raw.tar.gz"


def write_outputs(run: Run) -> dict[str, Any]:
    from benchmarks.real_gpu.check import board_profile, pack

    options = run.options
    evidence = Evidence(run.raw, options.simulate, board_profile(run))
    summary = summarise(run, evidence)
    (run.raw / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    pack(run.raw, options.outdir / ARCHIVE)
    (options.outdir / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    (options.outdir / "summary.md").write_text(markdown(summary))
    return summary


def summarise(run: Run, ev: Evidence) -> dict[str, Any]:
    env = run.data.get("environment", {})
    results = {
        "compare_idle": compare(ev, "idle"),
        "compare_load": compare(ev, "load"),
        "exports_idle": exports(ev, "idle"),
        "exports_load": exports(ev, "load"),
        "moves_together": moves_together(ev, run.data.get("load")),
        "nvml_cost": nvml_cost(ev),
        "serve": run.data.get("serve") or {"skipped": "serve did not run"},
        "xid": xid(ev),
        "gpm": gpm(ev),
        "mig": mig(ev),
        "not_supported": not_supported(ev),
    }
    findings = [f.as_dict() for f in settle(ev)]
    return {
        "format": FORMAT,
        "simulated": run.options.simulate,
        "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(run.started_wall)),
        "seconds": round(time.monotonic() - run.started, 1),
        "budget_seconds": run.options.total_budget,
        "board": board(ev),
        "environment": env,
        "missing": run.data.get("missing", ""),
        "archive": ARCHIVE,
        "steps": [asdict(s) for s in run.steps],
        "results": results,
        "assumptions": findings,
    }


def board(ev: Evidence) -> dict[str, Any]:
    readings = ev.readings("idle") or {}
    gpus = readings.get("gpus") or []
    return {
        "name": value(gpus[0]["name"]) if gpus else None,
        "gpus": len(gpus),
        "driver": value(readings.get("driver_version")),
        "nvml": value(readings.get("nvml_version")),
        "cuda_driver": value(readings.get("cuda_driver_version")),
        "profile": ev.profile_name,
    }


# --- results ---------------------------------------------------------------------------


def compare(ev: Evidence, phase: str) -> dict[str, Any]:
    """nvsmi_compare's table between the phase's exposition and nvidia-smi's answer
    taken right after it (static values equal, instantaneous within the tolerance)."""
    from nvwatch.agent.nvsmi_compare import PAIRINGS, format_rows
    from nvwatch.agent.nvsmi_compare import compare as pair_up

    exposition = ev.text(f"exposition-{phase}.prom")
    smi = ev.text(f"nvidia-smi-{phase}.csv")
    if exposition is None:
        return {"skipped": f"no {phase} recording"}
    if smi is None:
        reason = "simulated node, no nvidia-smi stand-in" if ev.simulated else "no nvidia-smi"
        return {"skipped": f"skipped: {reason}"}
    rows = pair_up(exposition, smi)
    (ev.raw / f"compare-{phase}.md").write_text(format_rows(rows))
    failing = [
        f"GPU {r.gpu} {r.query}: nvidia-smi {r.nvidia_smi}, nvwatch {r.nvwatch}: {r.note}"
        for r in rows
        if not r.ok
    ]
    tolerances = {
        p.query: "equal"
        if not p.tolerance and not p.relative
        else f"within {p.tolerance:g}" + (f" or {p.relative:.0%}" if p.relative else "")
        for p in PAIRINGS
    }
    return {
        "pairs": len(rows),
        "failing": failing,
        "tolerances_in_nvwatch_units": tolerances,
        "raw": f"compare-{phase}.md",
    }


def exports(ev: Evidence, phase: str) -> dict[str, Any]:
    """Every recorded NVML answer against the series the agent exported for it."""
    calls = ev.tape_calls(phase)
    exposition = ev.text(f"exposition-{phase}.prom")
    if calls is None or exposition is None:
        return {"skipped": f"no {phase} recording"}
    verdicts = judge(expected(calls), exposition)
    absent = [v for v in verdicts if v.expectation.value is None]
    return {
        "checked": len(verdicts),
        "must_be_absent": len(absent),
        "failing": [v.line() for v in verdicts if not v.ok],
        "raw": [f"tape-{phase}.json.gz", f"exposition-{phase}.prom"],
    }


_MOVES: tuple[tuple[str, str, dict[str, str], float], ...] = (
    ("utilization", "nvwatch_gpu_utilization_ratio", {}, 0.3),
    ("power", "nvwatch_gpu_power_watts", {}, 30.0),
    ("sm clock", "nvwatch_gpu_clock_hertz", {"clock": "sm"}, 100e6),
    ("pcie rx", "nvwatch_gpu_pcie_throughput_bytes_per_second", {"direction": "rx"}, 50e6),
)


def moves_together(ev: Evidence, load: dict[str, Any] | None) -> dict[str, Any]:
    """GPU 0 idle against loaded: utilization, power, SM clock, PCIe and energy rise."""
    idle_text, load_text = ev.text("exposition-idle.prom"), ev.text("exposition-load.prom")
    if idle_text is None or load_text is None:
        return {"skipped": "no loaded recording"}
    idle, busy = samples_of(idle_text), samples_of(load_text)
    rows = {}
    for name, metric, labels, margin in _MOVES:
        key = (metric, frozenset({("gpu", "0"), *labels.items()}))
        a, b = idle.get(key), busy.get(key)
        rows[name] = {
            "idle": a,
            "load": b,
            "rose": a is not None and b is not None and b > a + margin,
        }
    energy = []
    for phase in ("idle", "load"):
        gpu = ev.gpu(phase) or {}
        energy.append((gpu.get("energy") or {}).get("energy_power_mw"))
    rose = None not in energy and energy[1] > energy[0] * 1.1  # type: ignore[operator]
    rows["energy rate"] = {"idle": energy[0], "load": energy[1], "rose": rose}
    moved = [name for name, row in rows.items() if row["rose"]]
    return {
        "gpu": 0,
        "series": rows,
        "all_rose": len(moved) == len(rows),
        "rose": moved,
        "load": load or {},
    }


def nvml_cost(ev: Evidence) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for phase in ("idle", "load"):
        timing = ev.json(f"timing-{phase}.json")
        if not timing:
            continue
        per_function = timing.pop("per_function", {})
        heaviest = sorted(per_function.items(), key=lambda item: -item[1]["total_us_per_poll"])[:8]
        timing["heaviest_functions"] = {
            name: {
                "calls_per_poll": round(v["calls_per_poll"], 1),
                "median_us": round(v["median_us"], 1),
                "total_us_per_poll": round(v["total_us_per_poll"], 1),
            }
            for name, v in heaviest
        }
        result[phase] = timing
    bench = ev.json("bench-nvml.json")
    if bench:
        result["batched_vs_per_call"] = bench
    return result or {"skipped": "no timing ran"}


def xid(ev: Evidence) -> dict[str, Any]:
    events = ev.json("events.json") or {}
    found = events.get("xid")
    if not found:
        return {"skipped": "events did not run"}
    waits = found.get("waits") or []
    wait_s = (found.get("wait_ms") or 0) / 1000
    sleeping = bool(waits) and all(
        w["wall_s"] >= 0.8 * wait_s and w["cpu_s"] <= 0.1 * max(w["wall_s"], 1e-3)
        for w in waits
        if w["outcome"] == "Timeout"
    )
    listener = events.get("listener") or {}
    return {
        "created": found.get("created"),
        "error": found.get("error"),
        "waits": waits,
        "waited_without_busy_loop": sleeping if found.get("created") else None,
        "listener_cpu_per_s": listener.get("cpu_per_s"),
        "kernel_log": _xid_history(ev.text("nvwatch-doctor.txt")),
    }


def _xid_history(doctor: str | None) -> str | None:
    for line in (doctor or "").splitlines():
        if line.startswith("xid-history"):
            return line.split(None, 1)[1].strip()
    return None


def gpm(ev: Evidence) -> dict[str, Any]:
    events = ev.json("events.json") or {}
    readings = ev.readings("load") or {}
    return {"idle": (events.get("gpm") or [None])[0], "load": readings.get("gpm")}


def mig(ev: Evidence) -> dict[str, Any]:
    events = ev.json("events.json") or {}
    modes = [value(m.get("mode")) for m in events.get("mig") or []]
    exposition = ev.text("exposition-idle.prom") or ""
    exported = {
        dict(labels).get("gpu"): v
        for (name, labels), v in samples_of(exposition).items()
        if name == "nvwatch_gpu_mig_mode" and dict(labels).get("kind") == "current"
    }
    return {"nvml_mode_current_pending": modes, "exported_current": exported}


def not_supported(ev: Evidence) -> dict[str, Any]:
    calls = ev.tape_calls("idle")
    if calls is None:
        return {"skipped": "no idle recording"}
    answers = not_supported_calls(calls)
    return {"poll_readings_not_supported": answers, "count": len(answers)}


# --- markdown --------------------------------------------------------------------------


def markdown(summary: dict[str, Any]) -> str:
    b = summary["board"]
    simulated = summary["simulated"]
    title = f"SIMULATED ({simulated})" if simulated else "real GPU"
    out = [
        f"# nvwatch real-GPU check: {title}",
        "",
        f"- board: {b['gpus']}x {b['name']}, driver {b['driver']}, NVML {b['nvml']}, "
        f"simulated profile of this board: {b['profile'] or 'none'}",
        f"- started {summary['started']}, took {summary['seconds']}s of "
        f"{summary['budget_seconds']:.0f}s; raw outputs in {summary['archive']} (raw/...)",
        f"- environment: Python {summary['environment'].get('python')}, kernel "
        f"{summary['environment'].get('kernel')}, torch {summary['environment'].get('torch')}",
        f"- missing: {summary['missing'] or 'nothing'}",
    ]
    if simulated:
        out.append(
            "- **simulated run**: the verdicts below are the simulator's answers; they prove "
            "the check's code, not the hardware"
        )
    out += ["", "## Assumptions (docs/hardware-notes.md)", ""]
    out += ["| id | assumption | measured | verdict | raw file |", "|---|---|---|---|---|"]
    for f in summary["assumptions"]:
        verdict = f["verdict"] + (f": {f['note']}" if f["note"] else "")
        raw = ", ".join(f"raw/{name}" for name in f["raw"])
        out.append(
            f"| {f['id']} | {_cell(f['what'])}: {_cell(f['assumption'])} | "
            f"{_cell(f['measured'])} | {_cell(verdict)} | {raw} |"
        )
    r = summary["results"]
    out += ["", "## nvwatch against nvidia-smi", ""]
    for phase in ("idle", "load"):
        out.append(f"- {phase}: {_outcome(r[f'compare_{phase}'], 'pairs')}")
    out += ["", "## Every recorded NVML answer against what nvwatch exported", ""]
    for phase in ("idle", "load"):
        out.append(f"- {phase}: {_outcome(r[f'exports_{phase}'], 'checked')}")
    out += ["", "## Under load: do they move together (GPU 0)?", ""]
    moves = r["moves_together"]
    if "skipped" in moves:
        out.append(f"- {moves['skipped']}")
    else:
        for name, row in moves["series"].items():
            out.append(f"- {name}: idle {row['idle']}, load {row['load']}, rose: {row['rose']}")
        out.append(f"- all rose together: {moves['all_rose']}")
    out += ["", "## Cost", ""]
    for phase, timing in r["nvml_cost"].items():
        if phase in ("idle", "load"):
            out.append(
                f"- poll ({phase}): wall {timing['poll_wall_s']['median'] * 1000:.2f} ms, CPU "
                f"{timing['poll_cpu_s']['median'] * 1000:.2f} ms, "
                f"{timing['nvml_calls_per_poll']:.0f} NVML calls, "
                f"{timing['nvml_us_per_poll'] / 1000:.2f} ms in NVML"
            )
    bench = r["nvml_cost"].get("batched_vs_per_call")
    if bench:
        out.append(
            f"- NVLink reads of every GPU: batched {bench['batched']['median_wall'] * 1e3:.3f} ms, "
            f"per field {bench['per_field']['median_wall'] * 1e3:.3f} ms, per call "
            f"{bench['per_call']['median_wall'] * 1e3:.3f} ms"
        )
    serve = r["serve"]
    if "latency_s" in serve:
        out.append(
            f"- serve {serve['seconds']:.0f}s scraped each second: p99 "
            f"{serve['latency_s']['p99'] * 1000:.1f} ms, median "
            f"{serve['latency_s']['median'] * 1000:.1f} ms, CPU {serve['cpu_per_s'] * 100:.1f} %"
            f" of a core, RSS {serve['rss_bytes']['max'] / 2**20:.0f} MiB"
        )
    else:
        out.append(f"- serve: {serve.get('error') or serve.get('skipped')}")
    x = r["xid"]
    out += ["", "## XID, GPM, MIG, NotSupported", ""]
    out.append(
        f"- XID event set: created {x.get('created')}, waited without busy loop "
        f"{x.get('waited_without_busy_loop')}, listener CPU/s {x.get('listener_cpu_per_s')}, "
        f"kernel log: {x.get('kernel_log')}"
    )
    gpm_load = r["gpm"].get("load") or {}
    out.append(f"- GPM under load: in range {gpm_load.get('in_range')}")
    out.append(f"- MIG mode (current, pending) per GPU: {r['mig']['nvml_mode_current_pending']}")
    ns = r["not_supported"]
    out.append(
        f"- readings NVML answered NotSupported in a poll: {ns.get('count', ns.get('skipped'))} "
        "(each must be absent from the exposition: see the exports lines above)"
    )
    out += ["", "## Steps", "", "| step | status | seconds | note |", "|---|---|---|---|"]
    for s in summary["steps"]:
        out.append(f"| {s['name']} | {s['status']} | {s['seconds']:.1f} | {_cell(s['reason'])} |")
    return "\n".join(out) + "\n"


def _outcome(result: dict[str, Any], count: str) -> str:
    if "skipped" in result:
        return str(result["skipped"])
    failing = result["failing"]
    text = f"{result[count]} checked, {len(failing)} failing"
    return text + "".join(f"\n  - {_cell(line)}" for line in failing[:20])


def _cell(text: Any) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")
