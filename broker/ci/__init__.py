"""`broker ci`: the cost of a change to job manifests, between two git revisions, and the
rules it must pass (docs/ci.md). git plumbing, the change set, the diff, the rules and the
summary, one module each; the command itself is broker/cli/ci.py."""
