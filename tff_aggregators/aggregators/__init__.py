"""Aggregation factories (`tff.aggregators` style): what the server sees of
the clients' updates."""
