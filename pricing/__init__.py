"""The offer catalog: schema, bundled snapshot, importers, GPU facts, egress and overlays.

Imports nothing else of ours; pandas is imported inside the functions that need it.
"""
