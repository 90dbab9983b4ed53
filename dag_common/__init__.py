"""Pieces every component shares: the cluster config, the status vocabulary, the clock."""
