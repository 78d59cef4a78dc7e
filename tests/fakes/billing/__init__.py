"""A small fixed cost ledger and recorded billing-export samples that match it."""
