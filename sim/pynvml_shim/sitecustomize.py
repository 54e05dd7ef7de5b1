"""Put the simulated NVML under the real pynvml in a child process (`nvwatch simulate exec`).

Python imports `sitecustomize` at start-up from the first sys.path entry that has one;
`nvwatch.sim.nvml.exec_environment()` puts this directory first on PYTHONPATH. With
NVWATCH_SIMULATE=PROFILE set, `import pynvml` then finds a SimulatedNvml already installed,
so unmodified tools (gpustat, nvitop, scripts) see the simulated GPUs.
"""

from __future__ import annotations

import os
import sys

if os.environ.get("NVWATCH_SIMULATE"):
    # The child may be another interpreter than nvwatch's (a system `python`, a tool's
    # own venv). pynvml is pure Python: make nvwatch's copy importable, last on the path,
    # so the child's own packages, pynvml included if it has one, still come first.
    fallback = os.environ.get("NVWATCH_PYNVML_DIR")
    if fallback and fallback not in sys.path:
        sys.path.append(fallback)
    try:
        from nvwatch.sim.nvml import install_from_environment

        install_from_environment()
    except Exception as error:  # start-up must not die: say why the simulation is absent
        print(f"nvwatch simulate: simulated NVML not installed: {error}", file=sys.stderr)
