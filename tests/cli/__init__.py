"""Tests of memvault.cli; a package, so its modules may share a name with another folder's."""
