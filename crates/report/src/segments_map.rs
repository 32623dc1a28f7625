//! Terminal map of segments (being written).
