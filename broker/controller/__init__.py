"""The controller: the reconcile pass between the state store and a provider.

| module | job |
|---|---|
| `reconcile` | the pass (observe, finish, sweep) and `Controller` |
| `planning` | plan and order the queue in one batch; the queue view |
| `launching` | launch what the queue policy lets start |
| `closing` | close attempts: outcome, charges, lost work; the broker's own stops |
| `isolation` | one job's error holds or fails that job, never the pass |
| `outcomes` | the table from what a provider reports to an attempt's outcome |
| `checkpoints` | checkpoint stores per place, the copy before a move, its egress, lost work |
| `requests` | the launch request of an attempt |
| `steering` | a job's progress from the store, as the market decision's question |
| `pools` | a job held for a full pool, as the wait-or-burst question |

The decisions are `broker.dispatch`'s, shared with the simulator; this package keeps
the books in the state store.
"""

from broker.controller.planning import QueueLine
from broker.controller.reconcile import ACTIVE, Controller, PassReport

__all__ = ["ACTIVE", "Controller", "PassReport", "QueueLine"]
