"""The planner: cheapest compliant placement for a job, as a pure function."""
