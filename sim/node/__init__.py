"""One simulated DGX node as the agent on it sees it: its GPUs behind the simulated NVML,
its InfiniBand fabric, the chassis its BMC watches, its kernel log, the processes on its
GPUs, and the scenarios that break them; `nvwatch serve --simulate PROFILE` runs one."""
