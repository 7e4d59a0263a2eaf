"""Git and the vault: merging the files memvault owns, registering the merge driver, syncing."""
