//! Faulting the arenas in ahead of the parser, on the other core.
//!
//! Decoding a large snapshot writes a few hundred MB of fresh memory; the
//! kernel's page faults and zeroing cost about as much as the parsing. A
//! helper thread asks the kernel to populate the next few MB of each arena
//! (`MADV_POPULATE_WRITE`, Linux 5.14+) just ahead of where the parser
//! writes, so that work runs in parallel. Populating never changes memory
//! contents, so it is safe while the parser writes, and only a bounded
//! window ahead of use is populated, so resident memory does not grow.
//! Where the call is unsupported the helper stops at once.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

/// How far ahead of the parser each arena is populated.
const AHEAD: usize = 12 << 20;
const STEP: usize = 2 << 20;

/// One arena: its buffer and how many bytes of it the parser has used.
pub(crate) struct Arena {
    base: usize,
    cap: usize,
    pub(crate) used: AtomicUsize,
    /// The parser's input (read, not written): a mapped file's pages are
    /// read in ahead of the parser, so their faults run here too.
    input: bool,
}

impl Arena {
    pub(crate) fn of<T>(v: &Vec<T>) -> Arena {
        Arena {
            base: v.as_ptr() as usize,
            cap: v.capacity() * std::mem::size_of::<T>(),
            used: AtomicUsize::new(0),
            input: false,
        }
    }

    /// The parser's input; `used` is its position.
    pub(crate) fn input(bytes: &[u8]) -> Arena {
        Arena {
            base: bytes.as_ptr() as usize,
            cap: bytes.len(),
            used: AtomicUsize::new(0),
            input: true,
        }
    }

    /// Record progress (`len` items of a `Vec<T>`).
    #[inline]
    pub(crate) fn publish<T>(&self, v: &[T]) {
        // A reallocated vector is no longer this arena: stop following it.
        let used = if v.as_ptr() as usize == self.base {
            std::mem::size_of_val(v)
        } else {
            self.cap
        };
        self.used.store(used, Ordering::Relaxed);
    }
}

#[cfg(target_os = "linux")]
fn populate(start: usize, end: usize, read: bool) -> bool {
    const MADV_POPULATE_READ: i32 = 22;
    const MADV_POPULATE_WRITE: i32 = 23;
    extern "C" {
        fn madvise(addr: *mut std::ffi::c_void, len: usize, advice: i32) -> i32;
    }
    const PAGE: usize = 4096;
    let s = (start + PAGE - 1) & !(PAGE - 1);
    let e = end & !(PAGE - 1);
    if e <= s {
        return true;
    }
    let advice = if read {
        MADV_POPULATE_READ
    } else {
        MADV_POPULATE_WRITE
    };
    // SAFETY: the range lies inside an allocation that the parser owns (or
    // its input, which outlives the parse); populating only pre-faults
    // pages and never changes their contents (already-present pages are
    // left alone). If the allocation was freed meanwhile, the call fails
    // harmlessly.
    unsafe { madvise(s as *mut std::ffi::c_void, e - s, advice) == 0 }
}

#[cfg(not(target_os = "linux"))]
fn populate(_: usize, _: usize, _: bool) -> bool {
    false
}

/// Ask for transparent huge pages over `start..end` (`MADV_HUGEPAGE`):
/// one fault and one zeroing pass per 2 MiB instead of 512 of each. Where
/// the kernel has them off, or for memory it cannot back with them, the
/// call changes nothing.
#[cfg(target_os = "linux")]
fn hugepages(start: usize, end: usize) {
    const MADV_HUGEPAGE: i32 = 14;
    extern "C" {
        fn madvise(addr: *mut std::ffi::c_void, len: usize, advice: i32) -> i32;
    }
    const HUGE: usize = 2 << 20;
    let s = (start + HUGE - 1) & !(HUGE - 1);
    let e = end & !(HUGE - 1);
    if e > s {
        // SAFETY: the range lies inside an allocation that the parser owns;
        // the advice changes how pages are backed, never their contents.
        unsafe { madvise(s as *mut std::ffi::c_void, e - s, MADV_HUGEPAGE) };
    }
}

#[cfg(not(target_os = "linux"))]
fn hugepages(_: usize, _: usize) {}

/// Populate `arenas` ahead of their published use until `done` is set.
pub(crate) fn run(arenas: &[&Arena], done: &AtomicBool) {
    for a in arenas.iter().filter(|a| !a.input) {
        hugepages(a.base, a.base + a.cap);
    }
    let mut populated: Vec<usize> = vec![0; arenas.len()];
    loop {
        let mut worked = false;
        for (a, p) in arenas.iter().zip(populated.iter_mut()) {
            let used = a.used.load(Ordering::Relaxed);
            let target = (used + AHEAD).min(a.cap);
            if *p < used {
                *p = used;
            }
            if *p + STEP <= target || (*p < target && target == a.cap) {
                let end = (*p + STEP).min(target);
                if !populate(a.base + *p, a.base + end, a.input) {
                    return;
                }
                *p = end;
                worked = true;
            }
        }
        if done.load(Ordering::Relaxed) {
            return;
        }
        if !worked {
            std::thread::sleep(std::time::Duration::from_micros(200));
        }
    }
}
