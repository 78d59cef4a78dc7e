"""Cost reports over the ledger: grouped totals, savings, lost work, egress, real bills.

- `query`: ledger lines -> grouped totals, exact Decimal sums (`Line`, `Figures`, `group`).
- `lines`: the state store's ledger, jobs and attempts -> `Line`s (lost work, baselines).
- `savings`: the on-demand baseline that savings are measured against.
- `actual`: billing-export readers (AWS CUR, GCP BigQuery export, Azure cost details)
  and per-instance reconciliation of planned against billed.
- `chart`: daily spend as a terminal chart (rich) or a one-file HTML report (matplotlib).
- `report`: the pieces put together for `broker cost-report`.

Nothing here prints; see docs/reports.md for what every figure means.
"""
