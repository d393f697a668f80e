//! Analyses over correlated threads: who waits for whom.

pub mod waits;
