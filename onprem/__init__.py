"""On-prem GPU pools: inventory, allocation and executors, offered like a cloud."""
