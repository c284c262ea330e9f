"""Scale-out building blocks on PostgreSQL (design.md §11): leader leases with fencing, membership
by heartbeats, markets assigned to live workers by rendezvous hashing."""
