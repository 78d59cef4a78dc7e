"""Live prices from the clouds' own public price sources (`broker pricing refresh`).

One module per source: `aws` (Price List on-demand, EC2 spot price history),
`azure` (Retail Prices API), `gcp` (Cloud Billing Catalog API) and `interruption`
(AWS Spot Instance Advisor bands, learned rates). `units` is the one place where
published prices become USD per hour; `fetch` is HTTP with bounded retries;
`shapes` knows what the price lists do not say; `refresh` runs them all and
writes the catalog; `status` keeps when each source last succeeded. Nothing here
is imported by `broker --help` or the planner; cloud SDKs load inside functions.
"""
