"""The trace-driven simulator: the real planner, queue policy and controller on a
virtual clock, with a `SimulatedProvider` whose spot capacity follows a trace.
See docs/simulate.md."""
