"""The NotSupported tables (sim/nvml/unsupported.py and one per area): each entry is
what the library answers, on every GPU of every profile, with its reason as its doc."""

from __future__ import annotations

import pynvml
import pytest

from nvwatch.sim.gpu.mig_layout import parse_layout
from nvwatch.sim.nvml import SimulatedNvml
from nvwatch.sim.nvml.abi import ERROR_NOT_SUPPORTED, SUCCESS
from nvwatch.sim.nvml.board import BOARD_NOT_SUPPORTED
from nvwatch.sim.nvml.clock_settings import CLOCK_SETTINGS_NOT_SUPPORTED
from nvwatch.sim.nvml.core import NvmlCore
from nvwatch.sim.nvml.ecc import ECC_NOT_SUPPORTED
from nvwatch.sim.nvml.mig_devices import MIG_NOT_SUPPORTED
from nvwatch.sim.nvml.nvlink_usage import NVLINK_USAGE_NOT_SUPPORTED
from nvwatch.sim.nvml.processes import PROCESSES_NOT_SUPPORTED
from nvwatch.sim.nvml.topology import TOPOLOGY_NOT_SUPPORTED
from nvwatch.sim.nvml.unsupported import (
    NOT_SUPPORTED_ANYWHERE,
    NotSupportedTable,
    answers_not_supported,
)
from nvwatch.sim.profiles import PROFILES
from tests.sim.conftest import start

# answered NotSupported for every handle
EVERYWHERE: dict[str, NotSupportedTable] = {
    "board": BOARD_NOT_SUPPORTED,
    "clock_settings": CLOCK_SETTINGS_NOT_SUPPORTED,
    "ecc": ECC_NOT_SUPPORTED,
    "nvlink_usage": NVLINK_USAGE_NOT_SUPPORTED,
    "processes": PROCESSES_NOT_SUPPORTED,
    "topology": TOPOLOGY_NOT_SUPPORTED,
    "unsupported": NOT_SUPPORTED_ANYWHERE,
}
EVERY_TABLE = {**EVERYWHERE, "mig_devices": MIG_NOT_SUPPORTED}


def _documented_not_supported() -> set[str]:
    """The C functions of the library whose answer says it is a NotSupported table's."""
    return {
        name
        for name in dir(SimulatedNvml)
        if name.startswith("nvml")
        and (getattr(SimulatedNvml, name).__doc__ or "").startswith("NotSupported: ")
    }


def test_every_table_entry_is_the_library_s_answer_and_no_other_area_shadows_it() -> None:
    names = [name for table in EVERY_TABLE.values() for name in table]
    assert len(names) == len(set(names)), "a function in two tables"
    # a table whose class an earlier base shadowed would lose its entries here, and a
    # table missing from EVERY_TABLE would add some
    assert _documented_not_supported() == set(names)
    for table in EVERY_TABLE.values():
        for name, reason in table.items():
            assert reason.strip()
            assert getattr(SimulatedNvml, name).__doc__ == f"NotSupported: {reason}"


@pytest.mark.parametrize("profile", sorted(PROFILES))
def test_every_gpu_answers_not_supported_after_the_usual_checks(profile: str) -> None:
    lib, _ = start(profile)
    try:
        for index in range(lib.profile.gpu_count):
            handle = lib.handle_address(index)
            for table in EVERYWHERE.values():
                for name in table:
                    assert getattr(lib, name)(handle, None, None) == ERROR_NOT_SUPPORTED, name
        # the checks device_call makes come first: a handle of no GPU is refused
        name = next(iter(ECC_NOT_SUPPORTED))
        assert getattr(lib, name)(12345) == pynvml.NVML_ERROR_INVALID_ARGUMENT
    finally:
        pynvml.nvmlShutdown()


def test_mig_table_answers_only_for_mig_devices_and_gpus_in_mig_mode() -> None:
    lib, _ = start("dgx-a100", mig=parse_layout("0:3g.20gb*2", 8))
    try:
        mig_on, mig_off = lib.handle_address(0), lib.handle_address(1)
        device = lib.mig_handle_address(0, 0)
        rates = pynvml.c_nvmlUtilization_t()
        for handle in (mig_on, device):
            assert lib.nvmlDeviceGetUtilizationRates(handle, rates) == ERROR_NOT_SUPPORTED
        assert lib.nvmlDeviceGetUtilizationRates(mig_off, rates) == SUCCESS
    finally:
        pynvml.nvmlShutdown()


def test_a_function_both_written_out_and_in_a_table_is_refused() -> None:
    class Written(NvmlCore):
        def nvmlDeviceGetPdi(self, handle: object) -> int:
            return SUCCESS

    with pytest.raises(TypeError, match="nvmlDeviceGetPdi"):
        answers_not_supported({"nvmlDeviceGetPdi": "Blackwell"})(Written)
