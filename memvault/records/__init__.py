"""Session summaries and the knowledge graph: their files, their sidecar copies, and the sidecar."""
