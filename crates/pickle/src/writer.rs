//! Pickle writer (see the synth crate).
