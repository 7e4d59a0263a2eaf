"""The vault on disk: names, the memory file format, atomic file work, a token's folder, the watcher."""
