//! GPUs by the name PyTorch gives them: how much memory PyTorch sees on
//! one, where that figure comes from, and what a kernel's scratch depends
//! on (streaming multiprocessors, compute capability); and the device
//! facts every crate shares: the caching allocator's sizes ([`allocator`])
//! and the cuBLAS workspaces ([`workspace`]).
//!
//! The one table of GPUs in vramscope: the allocator model's `--gpu`
//! (`vramscope_simulate::gpus`), and the estimate's `gpu=` and
//! `max_batch_for=` in Python (through `vramscope._native.gpu`), all read
//! it. A name is matched whole, never read for a number: "NVIDIA H100 80GB
//! HBM3" is the H100 SXM's 79.18 GiB, not 10,080 GB, and a name the table
//! does not have is an error that lists the ones it has.
//!
//! ```
//! use vramscope_gpus::{find, Source};
//!
//! let h100 = find("NVIDIA H100 80GB HBM3").unwrap();   // torch.cuda.get_device_name()
//! assert_eq!(h100.total, Some(85_017_493_504));
//! assert_eq!(h100.source, Source::Measured);
//! assert_eq!(find("h100-80gb").unwrap().name, h100.name);  // a short name
//! assert_eq!(find("NVIDIA H100 PCIe").unwrap().sms, 114);
//! assert!(find("A100").unwrap().memory().is_err());      // 40 or 80 GB: say which
//! assert!(find("RTX 9999").unwrap_err().to_string().contains("gpu=<bytes>"));
//! ```

pub mod allocator;
mod table;
pub mod workspace;

pub use table::GPUS;

/// Where a GPU's total memory comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Source {
    /// `total_memory` read on the project's own GPU of this name.
    Measured,
    /// `total_memory` as PyTorch or CUDA reported it on someone else's GPU
    /// of this name, in public (the note says what was seen).
    Reported,
    /// Taken as another GPU's with the same memory (the note says which).
    SameAs,
    /// A family name ("A100") whose members differ in memory: no figure.
    Family,
}

impl Source {
    /// The word JSON and tests use: `measured`, `reported`, `same_as`, `family`.
    pub fn as_str(self) -> &'static str {
        match self {
            Source::Measured => "measured",
            Source::Reported => "reported",
            Source::SameAs => "same_as",
            Source::Family => "family",
        }
    }
}

/// One GPU.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Gpu {
    /// The name `torch.cuda.get_device_name()` returns for it.
    pub name: &'static str,
    /// Other spellings accepted (`"H100-80GB"`), matched as the name is.
    pub aliases: &'static [&'static str],
    /// `torch.cuda.get_device_properties(i).total_memory`, bytes; `None`
    /// for a family name.
    pub total: Option<u64>,
    /// Where `total` comes from.
    pub source: Source,
    /// What was seen, in a few words (for a family: its members).
    pub note: &'static str,
    /// Streaming multiprocessors (compute units under ROCm): what
    /// reductions size their global scratch by.
    pub sms: u32,
    /// Compute capability (major, minor): what picks attention kernels
    /// and the cuBLAS workspace.
    pub capability: (u32, u32),
}

impl Gpu {
    /// The total memory, or why this name gives none.
    pub fn memory(&self) -> Result<u64, GpuError> {
        self.total.ok_or_else(|| GpuError::NoMemory {
            name: self.name.to_owned(),
            members: self.note.to_owned(),
        })
    }

    /// Where the total comes from, as a sentence's end: "measured on the
    /// project's H100 SXM (…)", "reported: 81,008 MiB in …".
    pub fn total_from(&self) -> String {
        match self.source {
            Source::Measured => format!("measured on {}", self.note),
            Source::Reported => format!("reported in public for the {}: {}", self.name, self.note),
            Source::SameAs => format!("taken as {}", self.note),
            Source::Family => format!("none: the {} is one of {}", self.name, self.note),
        }
    }
}

/// Why a name gives no GPU, or no memory.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GpuError {
    /// Not in the table.
    #[error(
        "unknown GPU {name:?}: expected the name torch.cuda.get_device_name() gives for one of {known}; \
         for any other GPU pass its memory in bytes (gpu=<bytes> in Python, --capacity on the command line)"
    )]
    Unknown {
        /// The name as given.
        name: String,
        /// The names the table has, comma-separated.
        known: String,
    },
    /// A MIG slice: its memory is the slice's, not the GPU's.
    #[error(
        "{name:?} is a MIG slice: its memory and multiprocessors are the slice's, which the name does not give; \
         pass its memory in bytes (gpu=<bytes> in Python, --capacity on the command line)"
    )]
    Mig {
        /// The name as given.
        name: String,
    },
    /// A family name whose members differ in memory.
    #[error(
        "the name {name:?} does not say how much memory: it is one of {members}; \
         name one of them, or pass the memory in bytes (gpu=<bytes> in Python, --capacity on the command line)"
    )]
    NoMemory {
        /// The family's name.
        name: String,
        /// Its members.
        members: String,
    },
}

/// A name as the table compares it: upper case, the vendor's and the
/// product line's words dropped (`NVIDIA`, `Tesla`, `GeForce`, `AMD
/// Instinct`), then only letters and digits ("NVIDIA H100 80GB HBM3" →
/// "H10080GBHBM3", "h100-80gb" → "H10080GB").
pub fn key(name: &str) -> String {
    let upper = name.to_uppercase();
    let words: Vec<&str> = upper
        .split(|c: char| c.is_whitespace() || c == '_')
        .filter(|w| {
            !matches!(
                *w,
                "NVIDIA" | "TESLA" | "GEFORCE" | "AMD" | "INSTINCT" | "QUADRO"
            )
        })
        .collect();
    words
        .concat()
        .chars()
        .filter(char::is_ascii_alphanumeric)
        .collect()
}

/// The GPU named `name`: the name `torch.cuda.get_device_name()` gives, or
/// one of its aliases, in any case and spacing.
pub fn find(name: &str) -> Result<&'static Gpu, GpuError> {
    let k = key(name);
    if k.contains("MIG") && k.len() > 3 {
        return Err(GpuError::Mig {
            name: name.to_owned(),
        });
    }
    GPUS.iter()
        .find(|g| key(g.name) == k || g.aliases.iter().any(|a| key(a) == k))
        .ok_or_else(|| GpuError::Unknown {
            name: name.to_owned(),
            known: GPUS.iter().map(|g| g.name).collect::<Vec<_>>().join(", "),
        })
}

#[cfg(test)]
mod tests;
