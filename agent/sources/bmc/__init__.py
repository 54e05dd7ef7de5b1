"""The BMC source: one node's baseboard management controller read over IPMI 2.0.

Unlike the polled sources, a BMC is read at scrape time, per target, the way Prometheus's
multi-target exporters work (ipmi_exporter, snmp_exporter): `GET /probe?target=&module=`
on a management host. `reading` holds what one read returns, whoever made it (python-ipmi
against a real BMC, or the simulator's model of one).
"""
