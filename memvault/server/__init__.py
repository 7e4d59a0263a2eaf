"""Serving: the HTTP app and its transports, keys, process limits, stdio, nginx in front."""
