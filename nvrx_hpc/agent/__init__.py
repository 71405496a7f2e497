"""The node agent: one per node per job; rank registry, heartbeats and sections, hang and exit detection."""
