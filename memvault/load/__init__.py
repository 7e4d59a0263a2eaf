"""Loading a token: the snapshot and parse cache, and helper processes for large vaults."""
