"""A simulated node's InfiniBand fabric as the kernel shows it: the sysfs tree under
class/infiniband (HCA ports' counters and states) and the PCI device tree that puts each
GPU beside its HCA, real files on disk that the unmodified InfiniBand source reads."""
