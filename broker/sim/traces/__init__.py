"""Readers for the public trace formats (see docs/simulate.md for each reading):
each returns broker.sim.model types (SpotTrace, JobList)."""
