"""The chassis around a simulated node's GPUs as its BMC (baseboard management
controller) watches it: node power, inlet and exhaust air, fans and power supplies, their
faults, and the IPMI sensor records and readings a real BMC would answer, handed to the
`bmc` source's reader in-process (no socket)."""
