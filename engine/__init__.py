"""The pure domain of Trellis: entities, managers, role matching, queries, errors and ports.

Imports nothing of ours outside this package and no web, database or crypto library.
"""
