//! A safe, fast pickle reader for untrusted files.
//!
//! PyTorch memory snapshots are pickles. `pickle.load` would execute whatever
//! the file asks for; this crate never does: object construction and calls
//! become inert [`Opaque`] values and are listed in [`Document::skipped`].
//! It reads protocols 0 to 5, keeps memoised containers shared (a container
//! referenced twice is one [`ContainerId`]), bounds every length by the input
//! size, caps nesting, and recovers what it can from truncated input.
//!
//! ```
//! // pickle.dumps({"a": [1, 2]}, protocol=4)
//! let bytes = b"\x80\x04\x95\x10\x00\x00\x00\x00\x00\x00\x00}\x94\x8c\x01a\x94]\x94(K\x01K\x02es.";
//! let doc = vramscope_pickle::parse(bytes).unwrap();
//! let root = doc.root().container().unwrap();
//! let list = doc.dict_get(root, "a").unwrap().container().unwrap();
//! let items: Vec<i64> = doc.items(list).filter_map(|v| doc.as_int(v)).collect();
//! assert_eq!(items, [1, 2]);
//! ```

mod builder;
mod document;
mod error;
pub mod hash;
mod ops;
mod prefault;
mod text;
mod value;
mod vm;
pub mod writer;

pub use builder::DocumentBuilder;
pub use document::{
    CapacityError, Document, Items, Pairs, Skipped, Truncation, MAX_SKIPPED_RECORDS,
};
pub use error::PickleError;
pub use value::{ContainerId, ContainerKind, Opaque, Val, Value};
pub use vm::{parse, parse_with, ParseOptions};
