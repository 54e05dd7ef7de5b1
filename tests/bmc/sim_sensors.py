"""The test BMC's sensors, and the ipmi_sim files that describe it.

A node's view from its BMC: inlet and exhaust air, a CPU, two fans, two power supplies
and two more in one shared compact record, the node's input power, and a sensor whose
scanning is off (it reads "unavailable"). Values are raw bytes; the SDR holds the
conversion (temperatures raw = °C, fans RPM = raw x 100, power W = raw x 4). From this
table come the SDR source (compiled by sdrcomp), the emulator commands that create the
sensors (ipmi_sim_cmd(5)) and the LAN config (ipmi_lan(5)); tests take the values they
expect from it too.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

from nvwatch.sim.ports import LOOPBACK

USER = "admin"
PASSWORD = "password"
BMC_ADDRESS = 0x20


@dataclass(frozen=True)
class SimSensor:
    """One sensor of the simulated BMC: its SDR and its initial raw value."""

    number: int
    name: str
    entity: str  # sdrcomp's entity name or number
    sensor_type: str  # sdrcomp's sensor type name
    unit: str | None  # base unit for a threshold sensor; None: discrete power supply
    m: int = 1  # value = raw x m
    raw: int = 0
    # raw thresholds of a threshold sensor: unr, uc, unc (upper) and lc, lnc (lower)
    upper: tuple[int, int, int] | None = None
    lower: tuple[int, int] | None = None
    scanning: bool = True
    # a compact record shared by `share` sensors, numbered on from `number` and named
    # `name` and a numeric instance modifier counting from `modifier` (IPMI 2.0 43-2),
    # joined by a space as FreeIPMI shows them
    share: int = 1
    modifier: int = 0

    @property
    def names(self) -> dict[int, str]:
        """Sensor number -> name as a client shows it (one per sensor of a shared record)."""
        if self.share == 1:
            return {self.number: self.name}
        return {self.number + i: f"{self.name} {self.modifier + i}" for i in range(self.share)}


SENSORS: tuple[SimSensor, ...] = (
    SimSensor(1, "Inlet Temp", "0x37", "Temperature", "degrees_C", raw=24, upper=(45, 40, 35)),
    SimSensor(
        2, "Exhaust Temp", "system_board", "Temperature", "degrees_C", raw=38, upper=(80, 70, 60)
    ),
    SimSensor(3, "Fan1", "fan_cooling_device", "Fan", "RPM", m=100, raw=48, lower=(5, 10)),
    SimSensor(4, "Fan2", "fan_cooling_device", "Fan", "RPM", m=100, raw=50, lower=(5, 10)),
    SimSensor(5, "PSU1 Status", "power_supply", "Power_Supply", None),
    SimSensor(6, "PSU2 Status", "power_supply", "Power_Supply", None),
    SimSensor(7, "Pwr Consumption", "system_board", "Current", "Watts", m=4, raw=80),
    SimSensor(8, "CPU Temp", "processor", "Temperature", "degrees_C", raw=51, upper=(95, 90, 85)),
    SimSensor(9, "Spare Temp", "system_board", "Temperature", "degrees_C", raw=30, scanning=False),
    # two more supplies in one shared compact record: "Supply 3" and "Supply 4"
    SimSensor(10, "Supply", "power_supply", "Power_Supply", None, share=2, modifier=3),
)
# sensor numbers by role, for tests that inject faults
INLET, EXHAUST, FAN1, FAN2, PSU1, PSU2, POWER, CPU, UNSCANNED, PSU3 = (s.number for s in SENSORS)
PSU4 = PSU3 + 1
# every sensor's name by number (a shared record's sensors each have their own)
NAMES = {number: name for sensor in SENSORS for number, name in sensor.names.items()}
POWER_M = 4  # the power sensor's watts per raw count
# SDR record ids: the management controller locator is record 1, sensors follow in order
RECORD_IDS = {sensor.number: index + 2 for index, sensor in enumerate(SENSORS)}

# IPMI power supply offsets (sensor-specific, type 0x08; IPMI 2.0 table 42-3)
PSU_PRESENT, PSU_FAILURE, PSU_PREDICTIVE, PSU_AC_LOST = 0, 1, 2, 3
PSU_INPUT_LOST, PSU_OUT_OF_RANGE, PSU_CONFIG_ERROR = 4, 5, 6


def _sdr_header(sensor: SimSensor, record_type: int) -> list[str]:
    return [
        f"sdr type {record_type}",
        f"\tsensor_owner_id\t{BMC_ADDRESS:#04x}",
        "\tsensor_owner_lun\t0",
        "\tchannel_number\t0",
        f"\tsensor_number\t{sensor.number}",
        f"\tentity_id\t{sensor.entity}",
        f"\tentity_instance\t{sensor.number}",
        f"\tsensor_type\t{sensor.sensor_type}",
        "\tinit_scanning\ttrue",
        "\tinit_events\ttrue",
        "\tinit_sensor_type\ttrue",
        "\tdefault_event_gen_on\ttrue",
        "\tdefault_sensor_scan_on\ttrue",
        "\tsensor_auto_rearm\ttrue",
        "\tsensor_event_msg_ctrl\tper_state",
    ]


def _threshold_sdr(sensor: SimSensor) -> list[str]:
    lines = [
        *_sdr_header(sensor, 1),
        "\tsensor_threshold_access\treadable",
        "\tevent_reading_type_code\t1",
        "\tanalog_data_format\tunsigned",
        f"\tbase_unit\t{sensor.unit}",
        "\tlinearization\tlinear",
        f"\tm\t{sensor.m}",
        "\tb\t0",
        "\tr_exp\t0",
        "\tb_exp\t0",
        "\tsensor_maximum\t255",
        "\tsensor_minimum\t0",
    ]
    if sensor.upper:
        for event in ("uncgh", "ucgh", "unrgh"):
            lines += [f"\tassert_{event}\ttrue", f"\tdeassert_{event}\ttrue"]
        lines += [f"\t{t}_thrsh_readable\ttrue" for t in ("unc", "uc", "unr")]
        unr, uc, unc = sensor.upper
        lines += [f"\tunr_thresh\t{unr}", f"\tuc_thresh\t{uc}", f"\tunc_thresh\t{unc}"]
    if sensor.lower:
        for event in ("lncgl", "lcgl"):
            lines += [f"\tassert_{event}\ttrue", f"\tdeassert_{event}\ttrue"]
        lines += [f"\t{t}_thrsh_readable\ttrue" for t in ("lnc", "lc")]
        lc, lnc = sensor.lower
        lines += [f"\tlc_thresh\t{lc}", f"\tlnc_thresh\t{lnc}"]
    return [*lines, f'\tid_string\t"{sensor.name}"', "endsdr", ""]


def _supply_sdr(sensor: SimSensor) -> list[str]:
    lines = [*_sdr_header(sensor, 2), "\tevent_reading_type_code\t0x6f"]
    if sensor.share > 1:
        lines += [
            f"\tshare_count\t{sensor.share}",
            "\tid_string_modifier\tnumeric",
            f"\tinstance_modifier_off\t{sensor.modifier}",
            "\tentity_instance_incr\ttrue",
        ]
    for bit in range(4):
        lines += [
            f"\tassert_event{bit}\ttrue",
            f"\tdeassert_event{bit}\ttrue",
            f"\tevent{bit}_state_ret\ttrue",
        ]
    return [*lines, f'\tid_string\t"{sensor.name}"', "endsdr", ""]


def sdr_source() -> str:
    """The SDR repository in sdrcomp's language: the BMC's locator, then every sensor."""
    lines = [
        "sdr type 18",
        f"\tdevice_slave_address\t{BMC_ADDRESS:#04x}",
        "\tdevice_channel_number\t0",
        "\tchassis\ttrue",
        "\tipmb_event_gen\tfalse",
        "\tipmb_event_recv\tfalse",
        "\tfru_inventory\tfalse",
        "\tsel\ttrue",
        "\tsdr\ttrue",
        "\tsensor\ttrue",
        "\tentity_id\tsystem_board",
        "\tentity_instance\t1",
        '\tid_string\t"Sim BMC"',
        "endsdr",
        "",
    ]
    for sensor in SENSORS:
        lines += _threshold_sdr(sensor) if sensor.unit else _supply_sdr(sensor)
    return "\n".join(lines)


def _event_support(sensor: SimSensor) -> str:
    """Which states raise events: the thresholds the SDR has, or the supply offsets 0-3;
    and whether the sensor is scanned (one that is not reads "unavailable")."""
    mask = _threshold_mask(sensor) if sensor.unit else "000000000001111"
    scanning = "scanning" if sensor.scanning else "no-scanning"
    return (
        f"sensor_set_event_support {BMC_ADDRESS:#04x} 0 {sensor.number} enable {scanning} "
        f"per-state {mask} {mask} {mask} {mask}"
    )


def _threshold_mask(sensor: SimSensor) -> str:
    # 15 event offsets, bit 14 first: 11-6 upper going high/low, 5-0 lower (ipmi_sim_cmd(5))
    upper = "111111" if sensor.upper else "000000"
    lower = "111111" if sensor.lower else "000000"
    return "000" + upper + lower


def emu_source() -> str:
    """ipmi_sim_cmd(5) commands: the BMC, its SEL, and each sensor's initial state."""
    mc = f"{BMC_ADDRESS:#04x}"
    lines = [
        f"mc_setbmc {mc}",
        f"mc_add {mc} 0 no-device-sdrs 0x23 9 8 0x9f 0x1291 0xf02 persist_sdr",
        f"sel_enable {mc} 1000 0x0a",
    ]
    for sensor in SENSORS:
        if sensor.unit:
            lines.append(f"sensor_add {mc} 0 {sensor.number} 0x{_type_code(sensor):02x} 0x01")
            if sensor.upper or sensor.lower:
                unr, uc, unc = sensor.upper or (0, 0, 0)
                lc, lnc = sensor.lower or (0, 0)
                mask = ("111" if sensor.upper else "000") + ("011" if sensor.lower else "000")
                lines.append(
                    f"sensor_set_threshold {mc} 0 {sensor.number} readable {mask} "
                    f"{unr} {uc} {unc} 0 {lc} {lnc}"
                )
            lines.append(_event_support(sensor))
            lines.append(f"sensor_set_value {mc} 0 {sensor.number} {sensor.raw} 0")
        else:
            for number in sensor.names:
                lines.append(f"sensor_add {mc} 0 {number} 0x08 0x6f")
                lines.append(_event_support(dataclasses.replace(sensor, number=number)))
                # present, nothing else (takes no bit value: it always sets the bit)
                lines.append(f"sensor_set_bit_clr_rest {mc} 0 {number} {PSU_PRESENT} 0")
    lines.append(f"mc_enable {mc}")
    return "\n".join(lines) + "\n"


def initial_raw(number: int) -> int:
    """The raw value sensor `number` starts with."""
    return next(s.raw for s in SENSORS if s.number == number)


_TYPE_CODES = {"Temperature": 0x01, "Current": 0x03, "Fan": 0x04, "Power_Supply": 0x08}


def _type_code(sensor: SimSensor) -> int:
    return _TYPE_CODES[sensor.sensor_type]


def lan_conf(name: str, udp_port: int, console_port: int, plugin: Path | None) -> str:
    """ipmi_lan(5): one LAN channel on loopback, user 2 admin/password, the console."""
    lines = [
        f'name "{name}"',
        f"set_working_mc {BMC_ADDRESS:#04x}",
        "  startlan 1",
        f"    addr {LOOPBACK} {udp_port}",
        "    priv_limit admin",
        "    allowed_auths_callback none md2 md5 straight",
        "    allowed_auths_user none md2 md5 straight",
        "    allowed_auths_operator none md2 md5 straight",
        "    allowed_auths_admin none md2 md5 straight",
        "    guid a123456789abcdefa123456789abcdef",
        "  endlan",
        f'  user 2 true "{USER}" "{PASSWORD}" admin 10 none md2 md5 straight',
        f"console {LOOPBACK} {console_port}",
    ]
    if plugin is not None:
        watts = initial_raw(POWER) * POWER_M
        lines.append(f'loadlib "{plugin}" "watts={watts},sensor={POWER},m={POWER_M}"')
    return "\n".join(lines) + "\n"
