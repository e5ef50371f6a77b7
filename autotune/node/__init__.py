"""What the node itself says: its GPUs through NVML, its topology through
``nvidia-smi topo -m``, and the checks ``autotune doctor`` runs before a long study."""
