//! Reference cycles that keep PyTorch tensors alive.
//!
//! A tensor held only by a reference cycle (two objects referring to each
//! other, a bound method stored on its own object, a closure capturing
//! `self`) is not freed when the last variable goes away, but only when
//! Python's cycle collector runs. The Python package hooks `gc.callbacks`,
//! extracts the garbage of a collection as a [`Graph`] (every reference
//! named) and hands it over as JSON; this crate finds, in every connected
//! group of garbage that holds a tensor:
//!
//! * the **minimal cycle** of each strongly connected part that reaches a
//!   tensor (the shortest loop through its object nearest to the tensors);
//! * the **shortest path** from a cycle to each tensor;
//! * its **shape**, so that ten thousand identical leaks are one
//!   [`Finding`] with a count, the bytes they hold and one example.
//!
//! [`report_text`], [`finding_dot`] and [`report_html`] render the result;
//! [`merge`] adds the reports of many collections into a running total.
//!
//! ```
//! use vramscope_cycles::{analyze, report_text, CycleOptions, Graph};
//!
//! let json = r#"{
//!   "nodes": [
//!     {"type": "Node", "module": "__main__", "repr": "<Node>", "tensor": null},
//!     {"type": "Node", "module": "__main__", "repr": "<Node>", "tensor": null},
//!     {"type": "Tensor", "module": "torch", "repr": "tensor(...)",
//!      "tensor": {"shape": [512, 10], "dtype": "torch.float32", "device": "cuda:0",
//!                 "bytes": 20480, "requires_grad": false, "grad_fn": null, "stack": []}}
//!   ],
//!   "edges": [
//!     {"src": 0, "dst": 1, "label": ".other"},
//!     {"src": 1, "dst": 0, "label": ".other"},
//!     {"src": 0, "dst": 2, "label": ".value"}
//!   ],
//!   "site": "train.py:12 in step"
//! }"#;
//! let graph = Graph::from_json(json)?;
//! let report = analyze(&graph, &CycleOptions::default());
//! assert_eq!(report.findings.len(), 1);
//! assert_eq!(report.findings[0].bytes, 20480);
//! assert_eq!(report.findings[0].example.cycle.len(), 2);
//! print!("{}", report_text(&report));
//! # Ok::<(), vramscope_cycles::CycleError>(())
//! ```

mod analysis;
mod dot;
mod example;
mod explain;
mod graph;
mod html;
mod kinds;
mod layout;
mod report;
mod route;
mod scc;
mod signature;
mod text;

pub use analysis::analyze;
pub use dot::finding_dot;
pub use example::ELIDED_TYPE;
pub use explain::{bytes, count, reference};
pub use graph::{CycleError, Edge, Graph, NodeInfo, TensorInfo};
pub use html::report_html;
pub use layout::{layout, Layout, Placed, Route};
pub use report::{merge, CycleOptions, CycleReport, Example, Finding, Step, SCHEMA_VERSION};
pub use text::report_text;

/// Parse, validate and analyse a graph's JSON (what the Python side
/// sends) with the default options.
pub fn analyze_json(graph_json: &str) -> Result<CycleReport, CycleError> {
    Ok(analyze(
        &Graph::from_json(graph_json)?,
        &CycleOptions::default(),
    ))
}
