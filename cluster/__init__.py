"""``make cluster``: a local network of three controllers on one PostgreSQL database and two edge
routers connected to all of them, to try failover by hand (:mod:`cluster.local`)."""
