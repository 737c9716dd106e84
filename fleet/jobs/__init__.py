"""Background jobs a user starts and follows in the admin (bulk reconcile, CA rotation)."""
