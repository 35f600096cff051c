"""The fleet tier: the node agents' exports read back from a Prometheus-compatible store into one workspace for
the whole cluster, analysed by the node's own detect -> rca -> playbooks code (docs/FLEET.md)."""
