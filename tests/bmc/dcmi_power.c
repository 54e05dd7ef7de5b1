/*
 * DCMI power for OpenIPMI's ipmi_sim: a `loadlib` module the tests compile and load.
 *
 * Stock ipmi_sim 2.0.33 has no DCMI code (Get Power Reading answers 0xC1, invalid
 * command). This module registers a handler for the DCMI group extension (NetFn 0x2C,
 * group 0xDC) answering two commands, and a console command that sets the reading:
 *
 *   0x01 Get DCMI Capability Info, parameter 1 (supported capabilities): conformance
 *        1.5, optional capability "power management", out-of-band access on LAN.
 *   0x02 Get Power Reading, mode 1 (system power statistics): current, minimum,
 *        maximum and average watts, a timestamp, the period and "measurement active".
 *
 *   console: dcmi_power <mc> <watts> [<min> <max> <avg>]   (mirrored into the power
 *            sensor named at load time, raw = watts / m rounded, so both agree)
 *
 * loadlib "<path>/dcmi_power.so" "watts=320,sensor=7,m=4"
 *
 * It tests the client's parsing of a real reply on a real BMC's wire, not any firmware.
 */

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <OpenIPMI/ipmi_err.h>
#include <OpenIPMI/lanserv.h>
#include <OpenIPMI/mcserv.h>
#include <OpenIPMI/msg.h>
#include <OpenIPMI/serv.h>

#define DCMI_GROUP 0xDC
#define DCMI_GET_CAPABILITY_INFO 0x01
#define DCMI_GET_POWER_READING 0x02
#define DCMI_MEASUREMENT_ACTIVE 0x40

static struct {
    unsigned int current, minimum, maximum, average;
    unsigned int sensor;     /* sensor number mirrored with the reading */
    unsigned int multiplier; /* the sensor's M: watts = raw * M */
} power = {320, 320, 320, 320, 7, 4};

static void put16(unsigned char *at, unsigned int value)
{
    at[0] = value & 0xff;
    at[1] = (value >> 8) & 0xff;
}

static void put32(unsigned char *at, uint32_t value)
{
    put16(at, value & 0xffff);
    put16(at + 2, value >> 16);
}

static void capability_info(msg_t *msg, unsigned char *rdata, unsigned int *rdata_len)
{
    static const unsigned char supported[] = {0x00, DCMI_GROUP, 0x01, 0x05, 0x02,
                                              0x00, 0x01, 0x08};
    if (msg->len < 2) {
        rdata[0] = IPMI_REQUEST_DATA_LENGTH_INVALID_CC;
        *rdata_len = 1;
        return;
    }
    if (msg->data[1] != 1) {
        rdata[0] = IPMI_INVALID_DATA_FIELD_CC;
        *rdata_len = 1;
        return;
    }
    memcpy(rdata, supported, sizeof(supported));
    *rdata_len = sizeof(supported);
}

static void power_reading(msg_t *msg, unsigned char *rdata, unsigned int *rdata_len)
{
    if (msg->len < 4) {
        rdata[0] = IPMI_REQUEST_DATA_LENGTH_INVALID_CC;
        *rdata_len = 1;
        return;
    }
    if (msg->data[1] != 1) { /* only mode 1, system power statistics */
        rdata[0] = IPMI_INVALID_DATA_FIELD_CC;
        *rdata_len = 1;
        return;
    }
    rdata[0] = 0;
    rdata[1] = DCMI_GROUP;
    put16(rdata + 2, power.current);
    put16(rdata + 4, power.minimum);
    put16(rdata + 6, power.maximum);
    put16(rdata + 8, power.average);
    put32(rdata + 10, (uint32_t)time(NULL));
    put32(rdata + 14, 1000);
    rdata[18] = DCMI_MEASUREMENT_ACTIVE;
    *rdata_len = 19;
}

static void dcmi_handler(lmc_data_t *mc, msg_t *msg, unsigned char *rdata,
                         unsigned int *rdata_len, void *cb_data)
{
    (void)mc;
    (void)cb_data;
    switch (msg->cmd) {
    case DCMI_GET_CAPABILITY_INFO:
        capability_info(msg, rdata, rdata_len);
        break;
    case DCMI_GET_POWER_READING:
        power_reading(msg, rdata, rdata_len);
        break;
    default:
        rdata[0] = IPMI_INVALID_CMD_CC;
        *rdata_len = 1;
    }
}

static int read_watts(emu_out_t *out, char **toks, unsigned int *value, int required)
{
    const char *tok = mystrtok(NULL, " \t\n", toks);
    char *end;
    unsigned long parsed;

    if (!tok) {
        if (required)
            out->eprintf(out, "**dcmi_power: missing watts\n");
        return required ? -1 : 1;
    }
    parsed = strtoul(tok, &end, 0);
    if (*end != '\0' || parsed > 0xffff) {
        out->eprintf(out, "**dcmi_power: invalid watts %s\n", tok);
        return -1;
    }
    *value = (unsigned int)parsed;
    return 0;
}

static int dcmi_power_cmd(emu_out_t *out, emu_data_t *emu, lmc_data_t *mc, char **toks)
{
    unsigned int current, minimum, maximum, average;
    int rv;

    (void)emu;
    if (read_watts(out, toks, &current, 1))
        return -1;
    minimum = maximum = average = current;
    rv = read_watts(out, toks, &minimum, 0);
    if (rv == 0)
        rv = read_watts(out, toks, &maximum, 1) || read_watts(out, toks, &average, 1);
    if (rv < 0)
        return -1;
    power.current = current;
    power.minimum = minimum;
    power.maximum = maximum;
    power.average = average;
    rv = ipmi_mc_sensor_set_value(mc, 0, power.sensor,
                                  (current + power.multiplier / 2) / power.multiplier, 1);
    if (rv) {
        out->eprintf(out, "**dcmi_power: unable to set sensor %u, error 0x%x\n",
                     power.sensor, rv);
        return -1;
    }
    return 0;
}

static void parse_init(const char *initstr)
{
    char *copy, *item, *next = NULL;

    if (!initstr)
        return;
    copy = strdup(initstr);
    if (!copy)
        return;
    for (item = strtok_r(copy, ",", &next); item; item = strtok_r(NULL, ",", &next)) {
        unsigned int value;
        if (sscanf(item, "watts=%u", &value) == 1)
            power.current = power.minimum = power.maximum = power.average = value;
        else if (sscanf(item, "sensor=%u", &value) == 1)
            power.sensor = value;
        else if (sscanf(item, "m=%u", &value) == 1 && value > 0)
            power.multiplier = value;
    }
    free(copy);
}

int ipmi_sim_module_init(sys_data_t *sys, const char *initstr)
{
    (void)sys;
    parse_init(initstr);
    ipmi_emu_register_group_extension_handler(DCMI_GROUP, dcmi_handler, NULL);
    return ipmi_emu_add_cmd("dcmi_power", MC, dcmi_power_cmd);
}
