"""Who uses each GPU: Slurm jobs and Kubernetes pods, resolved off the poll path.

The pieces, left to right:

- `procfs`: what /proc says about a pid (cgroup lines, uid, environment), under a
  configurable root like sysfs.
- `slurm_cgroup`, `mapping_dir`, `slurm`: the three ways Slurm sites tell a GPU's job
  (cgroup path, a dcgm-exporter-format job-mapping directory written by a prolog, the
  process environment).
- `kubepods`, `kubelet`, `kubernetes`: the kubelet pod-resources API and the pod of a pid.
- `refresher`: one thread that runs the enabled resolvers on their own cadence, each
  bounded by a timeout, and keeps the result in a cache.
- `source`: the poller source `attribution`, which only reads that cache.

Results are plain dataclasses (`model`); nothing here knows Prometheus.
"""
