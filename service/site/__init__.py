"""What the service serves besides the protocols: probes, metrics, the contract (built by spec.py), the
index, the playground's files and /docs."""
