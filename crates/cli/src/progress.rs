//! A progress bar on stderr for loads that take long enough to wonder about.

use std::sync::Arc;

use indicatif::{ProgressBar, ProgressStyle};
use vramscope_snapshot::{LoadOptions, LoadProgress};

/// When the last load of this process began decoding (after parsing), for
/// `VRAMSCOPE_TIMING=1`'s stage split.
pub static DECODING_SINCE: std::sync::Mutex<Option<std::time::Instant>> =
    std::sync::Mutex::new(None);

/// Note when `opts`' load passes from parsing to decoding in
/// [`DECODING_SINCE`], keeping its progress bar (if any) as it was.
pub fn time_stages(opts: &mut LoadOptions) {
    let inner = opts.progress.take();
    opts.progress = Some(Arc::new(move |p: LoadProgress| {
        if p.stage == "decoding" {
            if let Ok(mut at) = DECODING_SINCE.lock() {
                *at = Some(std::time::Instant::now());
            }
        }
        if let Some(f) = &inner {
            f(p);
        }
    }));
}

/// Files above this size get a progress bar (when stderr is a terminal).
const BAR_THRESHOLD: u64 = 64 << 20;

/// Load options with a progress bar for a file of `len` bytes; call
/// `finish()` on the returned bar when done.
pub fn load_options(len: u64, quiet: bool) -> (LoadOptions, Option<ProgressBar>) {
    let mut opts = LoadOptions::default();
    if quiet || len < BAR_THRESHOLD {
        return (opts, None);
    }
    let bar = ProgressBar::new(len);
    bar.set_style(
        ProgressStyle::with_template("{msg:>9} [{bar:30}] {bytes}/{total_bytes} ({eta})")
            .unwrap_or_else(|_| ProgressStyle::default_bar())
            .progress_chars("=> "),
    );
    let b = bar.clone();
    opts.progress = Some(Arc::new(move |p: LoadProgress| {
        b.set_message(p.stage);
        if p.stage == "parsing" {
            b.set_length(p.total);
            b.set_position(p.done);
        }
    }));
    (opts, Some(bar))
}
