//! librip: per-thread instruction-pointer snapshots in a shared-memory ring.
