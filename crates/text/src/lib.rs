//! Numbers and text for people, shared by every crate that writes them.
//!
//! A leaf crate with no dependencies, so that crates which only format
//! (`cycles`, `estimate`, `live`) need not pull in the snapshot reader.
//!
//! * [`units`]: byte counts (`1.50 KiB`), counts (`1,234,567`), signed
//!   amounts (`+64.00 MiB`), and sizes read from text (`12GiB`).
//! * [`escape`]: text made safe for HTML and XML (the report, the SVG
//!   flamegraphs, the cycles page).
//!
//! ```
//! use vramscope_text::{escape, units};
//!
//! assert_eq!(units::bytes(3 << 29), "1.50 GiB");
//! assert_eq!(units::count(1234567), "1,234,567");
//! assert_eq!(units::signed_bytes(-512.0), "-512 B");
//! assert_eq!(units::parse_bytes("1.5 GB"), Ok(1_500_000_000));
//! assert_eq!(escape::markup("<b>x & 'y'</b>"), "&lt;b&gt;x &amp; &#39;y&#39;&lt;/b&gt;");
//! ```

pub mod escape;
pub mod units;
