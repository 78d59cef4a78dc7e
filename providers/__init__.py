"""Provider and ObjectStore interfaces, the error taxonomy and the cloud adapters."""
