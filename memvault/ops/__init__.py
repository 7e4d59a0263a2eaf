"""The operations the tools and the CLI share: the store, recall, access, edits, sweeps."""
