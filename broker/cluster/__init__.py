"""The cluster: node leases, partition leaders, reassignment, and key lookups across nodes."""
