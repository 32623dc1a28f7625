//! Rank, step and "dumped at exit" from the names frameworks give their
//! per-rank snapshot files; none stores the rank inside the file.
//!
//! * torchtitan: `…/step_000000000010/…/000003_step_10.pickle`, OOM dumps
//!   under `step_…_exit/`; older versions
//!   `memory_snapshot/iteration_10/rank3_memory_snapshot.pickle`, OOM dumps
//!   under `iteration_10_exit/`.
//! * torchtune: `iteration_10/rank0_memory_snapshot.pickle`.
//! * Megatron-LM: `{base}_{rank}{ext}` and `{base}_oom_rank_{rank}{ext}`.
//! * Composer: `rank{rank}.{batch}.memory_snapshot.pickle`.
//!
//! What the names do not say comes from the file order.

use std::path::{Path, PathBuf};

use regex::Regex;
use serde::Serialize;

/// One file of the job and what its path says.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct RankFile {
    pub path: PathBuf,
    pub rank: u32,
    /// Step, iteration or batch, when the path names one.
    pub step: Option<u64>,
    /// Dumped when the program failed (`_exit` directories, `oom` names).
    pub exit: bool,
    /// Where the rank came from: `path` or `order`.
    pub rank_from: &'static str,
}

struct Patterns {
    rank: Vec<Regex>,
    step: Vec<Regex>,
}

fn patterns() -> Patterns {
    let re = |s: &str| Regex::new(s).expect("built-in pattern");
    Patterns {
        // File-name patterns, most specific first; the rank is group 1.
        rank: vec![
            re(r"^(\d+)_step_\d+"),                // torchtitan: 000003_step_10
            re(r"(?i)oom_rank_(\d+)"),             // Megatron OOM dump
            re(r"(?i)(?:^|[^a-z])rank[_-]?(\d+)"), // rank3_…, rank_3, rank3.12.…
            re(r"_(\d+)$"),                        // Megatron: {base}_{rank}
        ],
        // Path patterns for the step; group 1.
        step: vec![
            re(r"(?i)step[_-]?(\d+)"),
            re(r"(?i)iteration_(\d+)"),
            re(r"(?i)iter[_-]?(\d+)"),
            re(r"(?i)^rank\d+\.(\d+)\."), // Composer: rank3.120.memory_snapshot
        ],
    }
}

/// The file name without snapshot extensions (`.pickle`, `.pkl`, `.json`,
/// `.gz`, `.zst`), so that `{base}_{rank}.pickle.gz` ends in the rank.
fn stem(path: &Path) -> String {
    let mut name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    loop {
        let lower = name.to_ascii_lowercase();
        let cut = [".gz", ".zst", ".pickle", ".pkl", ".json", ".pt"]
            .iter()
            .find(|e| lower.ends_with(*e));
        match cut {
            Some(e) => name.truncate(name.len() - e.len()),
            None => return name,
        }
    }
}

fn capture(re: &Regex, text: &str) -> Option<u64> {
    re.captures(text)?.get(1)?.as_str().parse().ok()
}

/// What `path` says; `rank_from` (a pattern whose first group is the
/// rank, matched against the whole path) wins over the built-in names.
fn parse(path: &Path, rank_from: Option<&Regex>, p: &Patterns) -> (Option<u32>, Option<u64>, bool) {
    let full = path.to_string_lossy();
    let name = stem(path);
    let rank = match rank_from {
        Some(re) => capture(re, &full),
        None => p.rank.iter().find_map(|re| capture(re, &name)).or_else(|| {
            // A directory named for the rank (`rank3/…`).
            path.parent()?
                .components()
                .rev()
                .find_map(|c| capture(&p.rank[2], &c.as_os_str().to_string_lossy()))
        }),
    };
    let step = p.step.iter().find_map(|re| capture(re, &name)).or_else(|| {
        path.parent()?.components().rev().find_map(|c| {
            p.step[..3]
                .iter()
                .find_map(|re| capture(re, &c.as_os_str().to_string_lossy()))
        })
    });
    let lower = full.to_ascii_lowercase();
    let exit = lower.contains("_exit") || name.to_ascii_lowercase().contains("oom");
    (rank.and_then(|r| u32::try_from(r).ok()), step, exit)
}

/// Ranks and steps of `paths`. Files whose names give no rank get the next
/// ranks after the named ones, in path order.
pub fn infer(paths: &[PathBuf], rank_from: Option<&Regex>) -> Vec<RankFile> {
    let p = patterns();
    let parsed: Vec<_> = paths.iter().map(|x| parse(x, rank_from, &p)).collect();
    let first = parsed.iter().filter_map(|x| x.0).max().map_or(0, |m| m + 1);
    let mut unnamed: Vec<usize> = (0..paths.len())
        .filter(|&i| parsed[i].0.is_none())
        .collect();
    unnamed.sort_by(|&a, &b| paths[a].cmp(&paths[b]));
    let mut by_order = vec![None; paths.len()];
    for (rank, i) in (first..).zip(unnamed) {
        by_order[i] = Some(rank);
    }
    paths
        .iter()
        .zip(parsed)
        .zip(by_order)
        .map(|((path, (rank, step, exit)), order)| RankFile {
            path: path.clone(),
            rank: rank.or(order).unwrap_or(0),
            step,
            exit,
            rank_from: if rank.is_some() { "path" } else { "order" },
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn one(p: &str) -> RankFile {
        infer(&[PathBuf::from(p)], None).remove(0)
    }

    #[test]
    fn every_layout_names_rank_step_and_exit() {
        let t = one("out/memory_snapshot/step_000000000010/000003_step_10.pickle");
        assert_eq!((t.rank, t.step, t.exit), (3, Some(10), false));
        let t = one("out/memory_snapshot/step_000000000012_exit/000005_step_12.pickle");
        assert_eq!((t.rank, t.step, t.exit), (5, Some(12), true));
        let t = one("outputs/memory_snapshot/iteration_20/rank7_memory_snapshot.pickle");
        assert_eq!((t.rank, t.step, t.exit), (7, Some(20), false));
        let t = one("outputs/memory_snapshot/iteration_20_exit/rank1_memory_snapshot.pickle");
        assert_eq!((t.rank, t.step, t.exit), (1, Some(20), true));
        let t = one("snapshots/mem_12.pickle");
        assert_eq!((t.rank, t.step, t.exit), (12, None, false));
        let t = one("snapshots/mem_oom_rank_4.pickle");
        assert_eq!((t.rank, t.step, t.exit), (4, None, true));
        let t = one("traces/rank2.300.memory_snapshot.pickle");
        assert_eq!((t.rank, t.step, t.exit), (2, Some(300), false));
        let t = one("dump/rank3/snapshot.pickle.gz");
        assert_eq!((t.rank, t.rank_from), (3, "path"));
    }

    #[test]
    fn unnamed_files_take_ranks_in_path_order_and_a_pattern_wins() {
        let files = infer(
            &[
                "b.pickle".into(),
                "a.pickle".into(),
                "x_rank0.pickle".into(),
            ],
            None,
        );
        assert_eq!(
            files
                .iter()
                .map(|f| (f.rank, f.rank_from))
                .collect::<Vec<_>>(),
            vec![(2, "order"), (1, "order"), (0, "path")]
        );
        let re = Regex::new(r"node(\d+)").expect("valid");
        let f = infer(&["run/node9/rank0.pickle".into()], Some(&re));
        assert_eq!(f[0].rank, 9);
    }
}
