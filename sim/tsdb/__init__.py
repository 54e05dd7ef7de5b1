"""Prometheus TSDB blocks written directly: what `promtool tsdb create-blocks-from`
makes of a text file, made from arrays instead, so that a day of a thousand nodes is
minutes of numpy rather than a hundred gigabytes of OpenMetrics to parse.

The format is Prometheus' own (its documented index and chunks formats); Prometheus,
promtool and vmctl read these blocks, and tests/sim/test_tsdb_block.py reads every
sample back through promtool.
"""
