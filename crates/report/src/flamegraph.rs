//! Memory flamegraph SVG (being written).
