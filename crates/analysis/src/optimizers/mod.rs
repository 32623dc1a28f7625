//! Which optimizers a program ran and what state each keeps: the rule a
//! user is told when the first step's allocations stay for the whole run.
//!
//! vramscope's recorder reads each optimizer itself (class, settings, state
//! tensors by kind); other files name the class in their step annotations
//! (`Optimizer.step#AdamW.step`, written by PyTorch's step hook), and the
//! rule then comes from the class as PyTorch defines it.
//!
//! ```no_run
//! let snap = vramscope_snapshot::load("snap.pickle".as_ref(), &Default::default())?;
//! if let Some(rule) = vramscope_analysis::optimizers::state_rule(&snap) {
//!     println!("{rule}");
//! }
//! # Ok::<(), vramscope_snapshot::SnapshotError>(())
//! ```

pub mod alternatives;
pub mod lbfgs;

use vramscope_snapshot::{OptimizerInfo, Snapshot};

use vramscope_text::units::bytes;

/// What a class keeps per parameter, as `torch.optim` defines it.
fn class_rule(class: &str) -> Option<&'static str> {
    Some(match class {
        "Adam" | "AdamW" | "NAdam" | "RAdam" | "SparseAdam" => {
            "exp_avg and exp_avg_sq, two tensors the size of each parameter (three with amsgrad)"
        }
        "SGD" => "momentum_buffer, one tensor the size of each parameter when momentum is set, nothing without momentum",
        "RMSprop" => "square_avg per parameter, plus momentum_buffer with momentum and grad_avg when centered",
        "Adagrad" => "sum, one tensor the size of each parameter, made when the optimizer is built",
        "Adamax" => "exp_avg and exp_inf, two tensors the size of each parameter",
        "Adadelta" => "square_avg and acc_delta, two tensors the size of each parameter",
        "Rprop" => "prev and step_size, two tensors the size of each parameter",
        "ASGD" => "ax, one tensor the size of each parameter",
        "LBFGS" => "its last history_size directions, two flat copies of all parameters each",
        "Adafactor" => "factored second moments: a row and a column vector per matrix",
        _ => return None,
    })
}

/// The optimizers vramscope's recorder read (empty in other files).
pub fn recorded(snap: &Snapshot) -> &[OptimizerInfo] {
    snap.source
        .recorder
        .as_ref()
        .map(|r| r.optimizers.as_slice())
        .unwrap_or_default()
}

/// Optimizer classes named by step annotations (`Optimizer.step#SGD.step`),
/// in first-seen order.
pub fn annotated_classes(snap: &Snapshot) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for a in &snap.annotations {
        let name = snap.str(a.name);
        let Some(rest) = name.strip_prefix("Optimizer.step#") else {
            continue;
        };
        let class = rest.split('.').next().unwrap_or(rest);
        if !class.is_empty() && !out.iter().any(|c| c == class) {
            out.push(class.to_owned());
        }
    }
    out
}

/// Class names as a list, repeats counted: `Adam ×2, SGD`.
pub fn names<'a>(classes: impl Iterator<Item = &'a str>) -> String {
    let mut seen: Vec<(&str, usize)> = Vec::new();
    for c in classes {
        match seen.iter_mut().find(|s| s.0 == c) {
            Some(s) => s.1 += 1,
            None => seen.push((c, 1)),
        }
    }
    seen.iter()
        .map(|(c, n)| {
            if *n > 1 {
                format!("{c} ×{n}")
            } else {
                (*c).to_owned()
            }
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// One recorded optimizer in a sentence: `SGD (momentum=0.9) keeps
/// momentum_buffer: 62 tensors, 44.59 MiB, for 44.59 MiB of parameters`.
pub fn describe(o: &OptimizerInfo) -> String {
    let shown: Vec<String> = [
        "momentum", "nesterov", "amsgrad", "centered", "foreach", "fused",
    ]
    .iter()
    .filter_map(|k| o.setting(k).map(|v| format!("{k}={v}")))
    .filter(|s| !s.ends_with("=false") && !s.ends_with("=null") && !s.ends_with("=0"))
    .collect();
    let name = if shown.is_empty() {
        o.type_name.clone()
    } else {
        format!("{} ({})", o.type_name, shown.join(", "))
    };
    let state = o.state_bytes();
    if state == 0 {
        let why = match (o.type_name.as_str(), o.setting("momentum")) {
            ("SGD", Some(m)) if m.parse::<f64>().ok() == Some(0.0) => {
                ": SGD keeps momentum buffers only when momentum is set"
            }
            _ => "",
        };
        return format!("{name} keeps no state tensors{why}");
    }
    let tensors: u64 = o.state.iter().map(|s| s.1).sum();
    let kinds: Vec<&str> = o
        .state
        .iter()
        .filter(|s| s.2 > 0)
        .map(|s| s.0.as_str())
        .collect();
    let kinds = match kinds.split_last() {
        Some((last, rest)) if !rest.is_empty() => format!("{} and {last}", rest.join(", ")),
        _ => kinds.join(""),
    };
    format!(
        "{name} keeps {kinds}: {tensors} tensors, {}, for {} of parameters ({:.1}×)",
        bytes(state),
        bytes(o.parameter_bytes),
        state as f64 / o.parameter_bytes.max(1) as f64,
    )
}

/// The sentence that says what the program's optimizers keep: from the
/// recorder's reading when the file has one, else from the classes the
/// step annotations name; `None` when neither is in the file.
pub fn state_rule(snap: &Snapshot) -> Option<String> {
    let recorded = recorded(snap);
    if !recorded.is_empty() {
        let all: Vec<String> = recorded.iter().map(describe).collect();
        return Some(format!("{}.", all.join("; ")));
    }
    let classes = annotated_classes(snap);
    if classes.is_empty() {
        return None;
    }
    let all: Vec<String> = classes
        .iter()
        .map(|c| match class_rule(c) {
            Some(rule) => format!("{c} keeps {rule}"),
            None => format!("{c} keeps its own per-parameter state"),
        })
        .collect();
    Some(format!("{}.", all.join("; ")))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(class: &str, settings: &[(&str, &str)], state: &[(&str, u64, u64)]) -> OptimizerInfo {
        OptimizerInfo {
            type_name: class.into(),
            module: "torch.optim".into(),
            settings: settings
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            parameters: 4,
            parameter_bytes: 1 << 20,
            parameter_dtypes: vec![("float32".into(), 1 << 20)],
            state: state
                .iter()
                .map(|(k, n, b)| (k.to_string(), *n, *b))
                .collect(),
        }
    }

    #[test]
    fn sgd_without_momentum_keeps_nothing() {
        let o = info("SGD", &[("momentum", "0"), ("foreach", "null")], &[]);
        assert_eq!(
            describe(&o),
            "SGD keeps no state tensors: SGD keeps momentum buffers only when momentum is set"
        );
    }

    #[test]
    fn adam_names_its_two_moments_and_their_size() {
        let o = info(
            "AdamW",
            &[("amsgrad", "false"), ("foreach", "true")],
            &[
                ("exp_avg", 4, 1 << 20),
                ("exp_avg_sq", 4, 1 << 20),
                ("step", 4, 16),
            ],
        );
        assert_eq!(
            describe(&o),
            "AdamW (foreach=true) keeps exp_avg, exp_avg_sq and step: 12 tensors, 2.00 MiB, for 1.00 MiB of parameters (2.0×)"
        );
    }

    #[test]
    fn repeated_classes_are_counted() {
        assert_eq!(names(["Adam", "SGD", "Adam"].into_iter()), "Adam ×2, SGD");
    }

    #[test]
    fn classes_without_a_recording_get_torchs_rule() {
        assert!(class_rule("SGD")
            .unwrap()
            .contains("nothing without momentum"));
        assert!(class_rule("Adam")
            .unwrap()
            .starts_with("exp_avg and exp_avg_sq"));
        assert!(class_rule("MyOwnOptimizer").is_none());
    }
}
