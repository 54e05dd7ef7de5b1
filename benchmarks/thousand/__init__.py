"""A thousand nodes for a day: the bulk history written straight into a Prometheus
block, replayed live, and what every panel and rule group costs each engine at that
size (docs/scale.md's 1,000-node section)."""
