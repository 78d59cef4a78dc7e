"""Decisions on plain values, shared by the controller and both simulator engines.

Each function takes values (hours, prices, what runs, the settings) and returns a
value; none reads the state store or calls a provider, so the production controller
(`broker.controller`) and the fleet-scale simulator (`broker.sim.scale`) ask exactly
the same rules and differ only in how they keep their books.

| module | decides |
|---|---|
| `settings` | `DispatchSettings`: the spot policy and the knobs every engine shares |
| `market` | which market a deadline job may use now (the spot policy's say) |
| `home` | whether a reclaimed job waits for spot where its checkpoint is |
| `hold` | whether a job reclaimed lately plans nothing for a while (flaps skipped) |
| `pool` | whether a job waits for a full on-prem pool or bursts to a cloud (Starburst) |
| `gangs` | where an N-node gang may go (the provider's `Gangs`), a spot gang's reclaim rate |
"""
