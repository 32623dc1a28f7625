//! What can replace a program's optimizer without changing its algorithm:
//! the 8-bit version of the same class, the same class sharded (ZeRO-1) or
//! stepped on the CPU. `advise` asks here before it replays any of them, so
//! that a program training with Adadelta, SGD or L-BFGS is never told to
//! switch to `AdamW8bit`: that changes how it trains, not only how much
//! its state takes.
//!
//! The 8-bit classes are bitsandbytes' (`bitsandbytes/optim/__init__.py`:
//! Adam, AdamW, SGD, RMSprop, Adagrad, Lion, LAMB, LARS; paged versions of
//! Adam, AdamW and Lion) and torchao's (`torchao/optim`: Adam and AdamW).
//! Both quantize state tensors of 4,096 elements or more
//! (`min_8bit_size`), in blocks of 256 elements with one fp32 scale each;
//! smaller tensors keep the parameters' precision.
//!
//! ```
//! use vramscope_analysis::optimizers::alternatives::{eight_bit, Stepped};
//! let sgd = Stepped::named("SGD", "torch.optim.sgd", &[("momentum", "0.9")]);
//! assert_eq!(eight_bit(&sgd).unwrap().bitsandbytes, "SGD8bit");
//! let lbfgs = Stepped::named("LBFGS", "torch.optim.lbfgs", &[]);
//! assert!(eight_bit(&lbfgs).is_err());
//! ```

use vramscope_snapshot::{OptimizerInfo, Snapshot};

/// The optimizer that stepped, as far as the file says.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Stepped {
    /// Its class (`AdamW`); empty when the file names none.
    pub class: String,
    /// The module that defines it (`torch.optim.adamw`), where the
    /// recorder read it.
    pub module: Option<String>,
    /// Its settings as the recorder read them (`momentum=0.9`); empty
    /// where only a step annotation names the class.
    pub settings: Vec<(String, String)>,
}

/// Elements under which both libraries keep a state tensor at full
/// precision (bitsandbytes' `min_8bit_size`, torchao's threshold).
pub const MIN_8BIT_ELEMENTS: u64 = 4096;

/// Elements per fp32 scale in the 8-bit state (block-wise quantization).
pub const BLOCK_ELEMENTS: u64 = 256;

/// The 8-bit classes that keep the algorithm of a program's optimizer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EightBit {
    /// bitsandbytes' class (`AdamW8bit`).
    pub bitsandbytes: &'static str,
    /// Its paged version, where bitsandbytes has one.
    pub paged: Option<&'static str>,
    /// torchao's class (any device), where torchao has one.
    pub torchao: Option<&'static str>,
}

impl Stepped {
    /// The first optimizer that stepped ([`Stepped::all`]'s first);
    /// `None` when the file names none.
    pub fn of(snap: &Snapshot) -> Option<Stepped> {
        Stepped::all(snap).into_iter().next()
    }

    /// Every optimizer class that stepped, once each, in the order the
    /// recorder read them (or the step annotations name them): a GAN's
    /// two, a model's dense and sparse parts.
    pub fn all(snap: &Snapshot) -> Vec<Stepped> {
        let recorded = super::recorded(snap);
        let found: Vec<Stepped> = if recorded.is_empty() {
            super::annotated_classes(snap)
                .into_iter()
                .map(|class| Stepped {
                    class,
                    ..Stepped::default()
                })
                .collect()
        } else {
            recorded.iter().map(Stepped::from_info).collect()
        };
        let mut out: Vec<Stepped> = Vec::new();
        for s in found {
            if !s.class.is_empty() && !out.iter().any(|o| o.class == s.class) {
                out.push(s);
            }
        }
        out
    }

    pub fn from_info(o: &OptimizerInfo) -> Stepped {
        Stepped {
            class: o.type_name.clone(),
            module: Some(o.module.clone()),
            settings: o.settings.clone(),
        }
    }

    /// A class with its module and settings, as text (tests, docs).
    pub fn named(class: &str, module: &str, settings: &[(&str, &str)]) -> Stepped {
        Stepped {
            class: class.into(),
            module: Some(module.into()),
            settings: settings
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        }
    }

    fn setting(&self, name: &str) -> Option<&str> {
        self.settings
            .iter()
            .find(|s| s.0 == name)
            .map(|s| s.1.as_str())
    }

    /// Whether a setting is on (`true`, a non-zero number); `None` when it
    /// was not recorded.
    fn on(&self, name: &str) -> Option<bool> {
        self.setting(name).map(|v| match v {
            "true" | "True" => true,
            "false" | "False" | "null" | "None" => false,
            v => !matches!(v.parse::<f64>(), Ok(x) if x == 0.0),
        })
    }

    /// Whether it is one of `torch.optim`'s classes (or the file says only
    /// its class, which `torch.optim` defines).
    pub fn is_torch(&self) -> bool {
        match &self.module {
            Some(m) => m == "torch.optim" || m.starts_with("torch.optim."),
            None => TORCH_CLASSES.contains(&self.class.as_str()),
        }
    }

    /// How the program's code names the class, for a line of code:
    /// `torch.optim.SGD`, or the class itself with a comment saying where
    /// it comes from; `torch.optim.AdamW` with a comment when the file
    /// names no class.
    pub fn code_name(&self) -> String {
        if self.class.is_empty() {
            return "torch.optim.AdamW".into(); // the comment is the caller's
        }
        if self.is_torch() {
            format!("torch.optim.{}", self.class)
        } else {
            self.class.clone()
        }
    }

    /// `import` line the code needs for [`Stepped::code_name`], if any.
    pub fn import(&self) -> Option<String> {
        match &self.module {
            Some(m) if !self.is_torch() && !self.class.is_empty() => {
                Some(format!("from {m} import {}", self.class))
            }
            _ => None,
        }
    }

    /// Whether the class is L-BFGS (`torch.optim.LBFGS`).
    pub fn is_lbfgs(&self) -> bool {
        self.class == "LBFGS"
    }
}

/// `torch.optim`'s classes.
const TORCH_CLASSES: &[&str] = &[
    "Adadelta",
    "Adafactor",
    "Adagrad",
    "Adam",
    "AdamW",
    "Adamax",
    "ASGD",
    "LBFGS",
    "NAdam",
    "RAdam",
    "RMSprop",
    "Rprop",
    "SGD",
    "SparseAdam",
    "Muon",
];

/// The 8-bit classes for the program's optimizer, or why there are none.
pub fn eight_bit(o: &Stepped) -> Result<EightBit, String> {
    let module = o.module.as_deref().unwrap_or("");
    if module.starts_with("bitsandbytes") && o.class.contains("8bit")
        || module.starts_with("torchao.optim")
    {
        return Err(format!(
            "the optimizer is already 8-bit or lower ({module}.{})",
            o.class
        ));
    }
    let bnb = |b, p, t| {
        Ok(EightBit {
            bitsandbytes: b,
            paged: p,
            torchao: t,
        })
    };
    // bitsandbytes' own 32-bit classes have the names of torch's.
    let class = o.class.trim_end_matches("32bit");
    match class {
        "Adam" | "AdamW" if o.on("amsgrad") == Some(true) => Err(format!(
            "{class} runs with amsgrad=True (a third state tensor, the largest second moment): bitsandbytes' and \
             torchao's 8-bit {class} have no AMSGrad"
        )),
        "Adam" => bnb("Adam8bit", Some("PagedAdam8bit"), Some("Adam8bit")),
        "AdamW" => bnb("AdamW8bit", Some("PagedAdamW8bit"), Some("AdamW8bit")),
        "SGD" if o.on("momentum") == Some(false) => {
            Err("SGD without momentum keeps no state to make 8-bit".into())
        }
        "SGD" if o.on("nesterov") == Some(true) => Err(
            "SGD runs with nesterov=True, which bitsandbytes' SGD8bit accepts and ignores (it would train \
             differently)"
                .into(),
        ),
        "SGD" => bnb("SGD8bit", None, None),
        "RMSprop" if o.on("centered") == Some(true) => {
            Err("RMSprop runs with centered=True, which bitsandbytes' RMSprop8bit does not support".into())
        }
        "RMSprop" if o.on("momentum") == Some(true) => Err(
            "RMSprop runs with momentum: torch keeps a momentum buffer beside square_avg, bitsandbytes' \
             RMSprop8bit one state tensor"
                .into(),
        ),
        "RMSprop" => bnb("RMSprop8bit", None, None),
        "Adagrad" => bnb("Adagrad8bit", None, None),
        "Lion" => bnb("Lion8bit", Some("PagedLion8bit"), None),
        "LAMB" => bnb("LAMB8bit", None, None),
        "LARS" => bnb("LARS8bit", None, None),
        "" => Err("the file does not name the optimizer: its 8-bit version (if bitsandbytes has one: Adam, AdamW, \
                   SGD with momentum, RMSprop, Adagrad, Lion, LAMB, LARS) cannot be named"
            .into()),
        other => Err(format!(
            "bitsandbytes and torchao have no 8-bit {other} (they have Adam, AdamW, SGD with momentum, RMSprop, \
             Adagrad, Lion, LAMB and LARS): AdamW8bit would change how the model trains, not only the precision \
             of its state"
        )),
    }
}

/// The 8-bit classes for every optimizer class that stepped, in order,
/// or why not where one has none (its class named).
pub fn eight_bit_all(all: &[Stepped]) -> Result<Vec<(String, EightBit)>, String> {
    let names: Vec<&str> = all.iter().map(|s| s.class.as_str()).collect();
    all.iter()
        .map(|s| match eight_bit(s) {
            Ok(e) => Ok((s.class.clone(), e)),
            Err(why) if all.len() > 1 => Err(format!(
                "the program steps {} optimizers ({}); for its {}: {why}",
                all.len(),
                names.join(", "),
                s.class
            )),
            Err(why) => Err(why),
        })
        .collect()
}

/// What one state tensor of `size` bytes takes in 8 bits, its parameters
/// `element_bytes` wide: one byte per element and an fp32 scale per 256
/// (`BLOCK_ELEMENTS`); tensors under 4,096 elements as they are.
pub fn eight_bit_bytes(size: u64, element_bytes: u64) -> u64 {
    let elements = size / element_bytes.max(1);
    if elements < MIN_8BIT_ELEMENTS {
        return size;
    }
    elements + 4 * elements.div_ceil(BLOCK_ELEMENTS)
}

/// Whether the optimizer can be sharded by ZeroRedundancyOptimizer or
/// stepped per parameter on the CPU, which both build one optimizer of the
/// class per share of the parameters; why not where it cannot.
pub fn per_parameter(o: &Stepped) -> Result<(), String> {
    if o.is_lbfgs() {
        return Err("L-BFGS computes each direction over all parameters at once (one flat vector) and calls the \
                    closure to search along it: one L-BFGS per share of the parameters is another algorithm"
            .into());
    }
    Ok(())
}

/// Whether the optimizer works on FSDP's sharded parameters as it does
/// on whole ones; why not where that is not known.
pub fn sharded_parameters(o: &Stepped) -> Result<(), String> {
    if o.is_lbfgs() {
        return Err("L-BFGS joins all gradients into one flat vector (`_gather_flat_grad`) and keeps its history \
                    as such vectors: over FSDP's sharded parameters, whether they stay sharded is not known here \
                    (torch.cat along the sharded dimension gathers)"
            .into());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_class_gets_its_own_8_bit_version_or_a_reason() {
        let adam = Stepped::named("Adam", "torch.optim.adam", &[("amsgrad", "false")]);
        assert_eq!(eight_bit(&adam).unwrap().torchao, Some("Adam8bit"));
        let ams = Stepped::named("AdamW", "torch.optim.adamw", &[("amsgrad", "true")]);
        assert!(eight_bit(&ams).unwrap_err().contains("AMSGrad"));
        let plain = Stepped::named("SGD", "torch.optim.sgd", &[("momentum", "0")]);
        assert!(eight_bit(&plain).unwrap_err().contains("no state"));
        let nesterov = Stepped::named(
            "SGD",
            "torch.optim.sgd",
            &[("momentum", "0.9"), ("nesterov", "true")],
        );
        assert!(eight_bit(&nesterov).unwrap_err().contains("ignores"));
        let adadelta = Stepped::named("Adadelta", "torch.optim.adadelta", &[]);
        assert!(eight_bit(&adadelta)
            .unwrap_err()
            .contains("no 8-bit Adadelta"));
        let done = Stepped::named("AdamW8bit", "bitsandbytes.optim.adamw", &[]);
        assert!(eight_bit(&done).unwrap_err().contains("already"));
        let bnb32 = Stepped::named("AdamW32bit", "bitsandbytes.optim.adamw", &[]);
        assert_eq!(eight_bit(&bnb32).unwrap().bitsandbytes, "AdamW8bit");
    }

    #[test]
    fn every_optimizer_of_a_program_needs_its_own_8_bit_class() {
        let gan = [
            Stepped::named("Adam", "torch.optim.adam", &[]),
            Stepped::named("SGD", "torch.optim.sgd", &[("momentum", "0.9")]),
        ];
        let classes = eight_bit_all(&gan).unwrap();
        assert_eq!(classes[0].1.bitsandbytes, "Adam8bit");
        assert_eq!(classes[1].1.bitsandbytes, "SGD8bit");
        let mixed = [
            Stepped::named("AdamW", "torch.optim.adamw", &[]),
            Stepped::named("Adadelta", "torch.optim.adadelta", &[]),
        ];
        let why = eight_bit_all(&mixed).unwrap_err();
        assert!(
            why.starts_with("the program steps 2 optimizers (AdamW, Adadelta); for its Adadelta:"),
            "{why}"
        );
    }

    #[test]
    fn small_tensors_keep_their_precision() {
        // 1,024 fp32 elements stay; 1 Mi elements take a byte each and
        // 4,096 scales.
        assert_eq!(eight_bit_bytes(4096, 4), 4096);
        assert_eq!(eight_bit_bytes(4 << 20, 4), (1 << 20) + 4 * 4096);
        // bf16 state: 2 bytes per element.
        assert_eq!(eight_bit_bytes(2 << 20, 2), (1 << 20) + 4 * 4096);
    }

    #[test]
    fn code_names_the_class_where_it_comes_from() {
        let sgd = Stepped::named("SGD", "torch.optim.sgd", &[]);
        assert_eq!(sgd.code_name(), "torch.optim.SGD");
        assert_eq!(sgd.import(), None);
        let ada = Stepped::named("Adafactor", "transformers.optimization", &[]);
        assert_eq!(ada.code_name(), "Adafactor");
        assert_eq!(
            ada.import().as_deref(),
            Some("from transformers.optimization import Adafactor")
        );
        let lbfgs = Stepped::named("LBFGS", "torch.optim.lbfgs", &[]);
        assert!(per_parameter(&lbfgs).is_err());
    }
}
