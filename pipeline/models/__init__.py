"""Models: where they live (`paths`), turning shipped files into checkpoints (`prepare`), and
names into directories (`resolve`). Torch-free at import: the control plane resolves models."""
