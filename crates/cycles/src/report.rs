//! The result model: findings (one per shape of cycle), the totals, and
//! [`merge`] for a running total over many collections.

use std::collections::HashMap;

use serde::{Deserialize, Serialize};

use crate::graph::{CycleError, Edge, NodeInfo};

/// The version of the [`CycleReport`] JSON; bumped on incompatible changes.
pub const SCHEMA_VERSION: u32 = 1;

/// Findings kept by [`merge`] at least (it never keeps fewer than either
/// side already had).
const MERGE_MAX_FINDINGS: usize = 100;
/// Distinct shapes and sites listed per finding.
pub(crate) const MAX_LISTED: usize = 5;

/// How [`crate::analyze`] works. `Default` gives the documented defaults.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CycleOptions {
    /// Nodes in a finding's example subgraph (the cycle, the paths and the
    /// tensors); a longer cycle is drawn with its middle elided, paths that
    /// do not fit are counted in `omitted_paths`. Default 60.
    pub max_example_nodes: usize,
    /// Findings kept, the largest by bytes; the rest are counted in
    /// `findings_omitted` and stay in the totals. Default 100.
    pub max_findings: usize,
}

impl Default for CycleOptions {
    fn default() -> Self {
        CycleOptions {
            max_example_nodes: 60,
            max_findings: 100,
        }
    }
}

/// Reference cycles that hold tensors, grouped by shape. Reading one,
/// missing fields take their [`CycleReport::empty`] values.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct CycleReport {
    /// [`SCHEMA_VERSION`].
    pub schema_version: u32,
    /// Analyses (collections) merged into this report.
    pub collections: u64,
    /// Garbage objects and references analysed.
    pub nodes: u64,
    pub edges: u64,
    /// Connected groups of garbage that contain at least one tensor.
    pub components_with_tensors: u64,
    /// Of those, the ones where a reference cycle holds a tensor (the sum
    /// of the findings' counts, omitted findings included).
    pub cyclic_components: u64,
    /// Tensors held by reference cycles, and their bytes (a storage shared
    /// by views counted once per analysis).
    pub tensors: u64,
    pub bytes: u64,
    /// Garbage tensors that no cycle reaches (the graph lacked an edge).
    pub unreached_tensors: u64,
    /// Findings beyond `max_findings`, left out of `findings`.
    pub findings_omitted: u64,
    /// Largest `bytes` first.
    pub findings: Vec<Finding>,
}

/// Every garbage component with the same shape: the same minimal cycle
/// (types and references, whichever object it starts at) and the same
/// kinds of paths from it to the tensors (list indexes and addresses
/// ignored). Tensor sizes are not part of the shape: they are listed in
/// `shapes_seen`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Finding {
    /// A hash of the shape (32 hex digits); equal shapes, equal signatures,
    /// in any analysis.
    pub signature: String,
    /// `Node —.other→ Node —.other→ (cycle) holds 2 tensors, 40.00 KiB`
    /// (the example occurrence).
    pub title: String,
    /// Why the tensors stay allocated and how to break the loop.
    pub explanation: String,
    /// The reference that closes the loop: `method.__self__ → Node`.
    pub closing_edge: String,
    /// Components (occurrences) with this shape.
    pub count: u64,
    /// Tensors they hold, and their bytes.
    pub tensors: u64,
    pub bytes: u64,
    /// The largest occurrence's bytes.
    pub bytes_per_occurrence: u64,
    /// Objects on the minimal cycle.
    pub cycle_length: u64,
    /// Up to 5 distinct `[512, 10] float32 cuda:0`.
    pub shapes_seen: Vec<String>,
    /// Distinct classes (other than tensors) on the cycle.
    pub classes: Vec<String>,
    /// Up to 5 distinct collection sites (the graphs' `site`).
    pub sites: Vec<String>,
    /// The first occurrence.
    pub example: Example,
}

/// One occurrence as a small graph: the cycle's, the paths' and the
/// tensors' nodes only, re-indexed from 0.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Example {
    pub nodes: Vec<NodeInfo>,
    /// The references of the cycles and paths (each once).
    pub edges: Vec<Edge>,
    /// The minimal cycle, starting at the object nearest to the tensors;
    /// the last step's label closes the loop back to the first.
    pub cycle: Vec<Step>,
    /// Minimal cycles of the component's other strongly connected parts
    /// that reach a tensor.
    pub other_cycles: Vec<Vec<Step>>,
    /// One shortest path per tensor from a cycle's object to it, largest
    /// tensor first; its last step is the tensor (label empty).
    pub paths: Vec<Vec<Step>>,
    /// Cycles and paths left out to keep the example small.
    pub omitted_cycles: u64,
    pub omitted_paths: u64,
}

/// One object along a cycle or path.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Step {
    /// Index into [`Example::nodes`].
    pub node: usize,
    /// Its class name.
    #[serde(rename = "type")]
    pub type_name: String,
    /// The reference from this object to the next step's (empty at the
    /// end of a path).
    pub label: String,
}

impl Default for CycleReport {
    fn default() -> Self {
        CycleReport::empty()
    }
}

impl CycleReport {
    /// A report of nothing (the start of a running total).
    pub fn empty() -> CycleReport {
        CycleReport {
            schema_version: SCHEMA_VERSION,
            collections: 0,
            nodes: 0,
            edges: 0,
            components_with_tensors: 0,
            cyclic_components: 0,
            tensors: 0,
            bytes: 0,
            unreached_tensors: 0,
            findings_omitted: 0,
            findings: Vec::new(),
        }
    }

    /// Read a report written by [`CycleReport::to_json`]; empty text (or
    /// `null`) reads as [`CycleReport::empty`].
    pub fn from_json(json: &str) -> Result<CycleReport, CycleError> {
        let t = json.trim();
        if t.is_empty() || t == "null" {
            return Ok(CycleReport::empty());
        }
        let bad = |e: serde_json::Error| CycleError::Json {
            what: "cycle report",
            message: e.to_string(),
        };
        // The version first, so a future schema gets the right message.
        #[derive(Deserialize)]
        struct Version {
            #[serde(default = "current")]
            schema_version: u32,
        }
        fn current() -> u32 {
            SCHEMA_VERSION
        }
        let v: Version = serde_json::from_str(t).map_err(bad)?;
        if v.schema_version != SCHEMA_VERSION {
            return Err(CycleError::Schema {
                found: v.schema_version,
                expected: SCHEMA_VERSION,
            });
        }
        serde_json::from_str(t).map_err(bad)
    }

    /// The JSON form (stable snake_case field names).
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }

    /// The finding at `index`, or an error naming the range.
    pub fn finding(&self, index: usize) -> Result<&Finding, CycleError> {
        self.findings.get(index).ok_or(CycleError::NoSuchFinding {
            index,
            len: self.findings.len(),
        })
    }

    /// Largest bytes first (then most occurrences, then signature), at most
    /// `max` kept.
    pub(crate) fn sort_and_cap(&mut self, max: usize) {
        self.findings.sort_by(|a, b| {
            (b.bytes, b.count, &a.signature).cmp(&(a.bytes, a.count, &b.signature))
        });
        if self.findings.len() > max {
            self.findings_omitted += (self.findings.len() - max) as u64;
            self.findings.truncate(max);
        }
    }
}

/// Add `other` into `into`: totals add up, findings with the same signature
/// add their counts, tensors and bytes (keeping `into`'s example, title and
/// explanation), new ones are appended; then sorted by bytes.
pub fn merge(into: &mut CycleReport, other: CycleReport) {
    into.collections += other.collections;
    into.nodes += other.nodes;
    into.edges += other.edges;
    into.components_with_tensors += other.components_with_tensors;
    into.cyclic_components += other.cyclic_components;
    into.tensors += other.tensors;
    into.bytes += other.bytes;
    into.unreached_tensors += other.unreached_tensors;
    into.findings_omitted += other.findings_omitted;
    let max = MERGE_MAX_FINDINGS
        .max(into.findings.len())
        .max(other.findings.len());
    let mut at: HashMap<String, usize> = into
        .findings
        .iter()
        .enumerate()
        .map(|(i, f)| (f.signature.clone(), i))
        .collect();
    for f in other.findings {
        match at.get(&f.signature) {
            Some(&i) => {
                let t = &mut into.findings[i];
                t.count += f.count;
                t.tensors += f.tensors;
                t.bytes += f.bytes;
                t.bytes_per_occurrence = t.bytes_per_occurrence.max(f.bytes_per_occurrence);
                union_capped(&mut t.shapes_seen, f.shapes_seen);
                union_capped(&mut t.sites, f.sites);
            }
            None => {
                at.insert(f.signature.clone(), into.findings.len());
                into.findings.push(f);
            }
        }
    }
    into.sort_and_cap(max);
}

/// Append the items of `b` not in `a`, keeping at most [`MAX_LISTED`].
fn union_capped(a: &mut Vec<String>, b: Vec<String>) {
    for s in b {
        if a.len() >= MAX_LISTED {
            break;
        }
        if !a.contains(&s) {
            a.push(s);
        }
    }
}
