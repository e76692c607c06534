//! The cores of the completion objects: a completion queue's entries and
//! slot credits, a counter's values, and how either blocks (the wait
//! object).
//!
//! The protocol engine completes operations into these; the libfabric
//! objects (`objects::Cq`, `objects::Cntr`) wrap them with their fid, their
//! domain and the progress a read drives. Below the protocol, so that the
//! engine needs nothing from the objects above it.

pub mod cntr;
pub mod cq;
pub mod wait;
