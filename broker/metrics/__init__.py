"""Prometheus metrics of the broker (docs/metrics.md): `figures` counts them from the
state, `exposition` makes them Prometheus families, `server` serves them over HTTP.
`prometheus_client` is imported only inside functions: `broker --help` never loads it."""
