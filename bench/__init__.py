"""Benchmarks: synthetic topologies, an OpenZiti-like baseline and ``python -m bench`` runners."""
