//! The object graph of one garbage collection, as the Python side extracts
//! it: every garbage object a node, every reference between them a named
//! edge. Parsing validates it (ids in range), so the analysis never sees an
//! edge it cannot follow.

use serde::{Deserialize, Deserializer, Serialize};

/// Why a graph or report could not be read.
#[derive(Debug, thiserror::Error)]
pub enum CycleError {
    /// Not JSON, or JSON of the wrong shape (serde's message names the
    /// field, line and column).
    #[error("invalid {what} JSON: {message}")]
    Json {
        /// `cycle graph` or `cycle report`.
        what: &'static str,
        message: String,
    },
    /// An edge names a node that does not exist.
    #[error("edge {edge} ({label:?}): {end} node id {id} is out of range (the graph has {nodes} node(s))")]
    NodeOutOfRange {
        edge: usize,
        label: String,
        /// `src` or `dst`.
        end: &'static str,
        id: usize,
        nodes: usize,
    },
    /// More nodes or edges than the analysis indexes.
    #[error(
        "the graph has {nodes} nodes and {edges} edges; at most 4294967294 of each are supported"
    )]
    TooLarge { nodes: usize, edges: usize },
    /// A report written by another version of this schema.
    #[error("cycle report schema_version {found} is not supported (expected {expected})")]
    Schema { found: u32, expected: u32 },
    /// A finding index past the end of a report.
    #[error("finding {index} does not exist (the report has {len} finding(s))")]
    NoSuchFinding { index: usize, len: usize },
}

/// `null` reads as the type's default (Python's `None` for a missing
/// module, stack or label).
fn null_default<'de, D, T>(d: D) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: Default + Deserialize<'de>,
{
    Ok(Option::<T>::deserialize(d)?.unwrap_or_default())
}

/// The garbage of one collection.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Graph {
    /// Every garbage object; a node's id is its index here.
    pub nodes: Vec<NodeInfo>,
    /// References between them, `src` refers to `dst`.
    #[serde(default, deserialize_with = "null_default")]
    pub edges: Vec<Edge>,
    /// Where the collection happened or the code that created the objects.
    #[serde(default)]
    pub site: Option<String>,
}

/// One garbage object.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct NodeInfo {
    /// The class name (`Node`, `dict`, `method`, `Tensor`, `Parameter`).
    #[serde(rename = "type", default, deserialize_with = "null_default")]
    pub type_name: String,
    /// The class's module (`__main__`, `torch`, `builtins`).
    #[serde(default, deserialize_with = "null_default")]
    pub module: String,
    /// A short `repr` of the object.
    #[serde(default, deserialize_with = "null_default")]
    pub repr: String,
    /// Present exactly when the object is a tensor.
    #[serde(default)]
    pub tensor: Option<TensorInfo>,
}

/// What a tensor node holds.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct TensorInfo {
    #[serde(default, deserialize_with = "null_default")]
    pub shape: Vec<u64>,
    /// `torch.float32`.
    #[serde(default, deserialize_with = "null_default")]
    pub dtype: String,
    /// `cuda:0`, `cpu`.
    #[serde(default, deserialize_with = "null_default")]
    pub device: String,
    /// Bytes of the tensor's data.
    #[serde(default, deserialize_with = "null_default")]
    pub bytes: u64,
    #[serde(default, deserialize_with = "null_default")]
    pub requires_grad: bool,
    /// The autograd node that made it (`MulBackward0`), if any.
    #[serde(default)]
    pub grad_fn: Option<String>,
    /// Where it was allocated, innermost frame first (`file:line in fn`).
    #[serde(default, deserialize_with = "null_default")]
    pub stack: Vec<String>,
    /// Optional identity of the underlying storage (e.g. its data pointer):
    /// tensors of one graph that share a storage (views) count its bytes
    /// once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub storage: Option<u64>,
}

/// A reference from `src` to `dst`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Edge {
    pub src: usize,
    pub dst: usize,
    /// How `src` refers to `dst`: `.attr`, `['key']`, `[3]`, `{item}`,
    /// `closure 'name'`, `cell_contents`, `__self__`, `__func__`,
    /// `local 'x'`, `f_back`, `__dict__`, `__globals__`, `?`.
    #[serde(default, deserialize_with = "null_default")]
    pub label: String,
}

impl NodeInfo {
    /// The class name qualified by its module, unless the module is
    /// `builtins` or unknown.
    pub fn qualified_type(&self) -> String {
        if self.module.is_empty() || self.module == "builtins" {
            self.type_name.clone()
        } else {
            format!("{}.{}", self.module, self.type_name)
        }
    }

    /// Whether the node is a tensor.
    pub fn is_tensor(&self) -> bool {
        self.tensor.is_some()
    }
}

impl TensorInfo {
    /// `[512, 10]`.
    pub fn shape_text(&self) -> String {
        let shape: Vec<String> = self.shape.iter().map(|d| d.to_string()).collect();
        format!("[{}]", shape.join(", "))
    }

    /// `[512, 10] float32 cuda:0` (the dtype without its `torch.` prefix).
    pub fn describe(&self) -> String {
        let dtype = self.dtype.strip_prefix("torch.").unwrap_or(&self.dtype);
        let mut s = self.shape_text();
        for part in [dtype, self.device.as_str()] {
            if !part.is_empty() {
                s.push(' ');
                s.push_str(part);
            }
        }
        s
    }
}

impl Graph {
    /// Parse and validate the JSON the Python side writes.
    pub fn from_json(json: &str) -> Result<Graph, CycleError> {
        let g: Graph = serde_json::from_str(json).map_err(|e| CycleError::Json {
            what: "cycle graph",
            message: e.to_string(),
        })?;
        g.validate()?;
        Ok(g)
    }

    /// Every edge's ends are node ids; the counts fit the indexes.
    pub fn validate(&self) -> Result<(), CycleError> {
        let n = self.nodes.len();
        if n >= u32::MAX as usize || self.edges.len() >= u32::MAX as usize {
            return Err(CycleError::TooLarge {
                nodes: n,
                edges: self.edges.len(),
            });
        }
        for (i, e) in self.edges.iter().enumerate() {
            for (end, id) in [("src", e.src), ("dst", e.dst)] {
                if id >= n {
                    return Err(CycleError::NodeOutOfRange {
                        edge: i,
                        label: e.label.clone(),
                        end,
                        id,
                        nodes: n,
                    });
                }
            }
        }
        Ok(())
    }
}

/// Compressed adjacency: the edges leaving (or entering) each node, in the
/// order of the input, as indexes into [`Graph::edges`].
pub(crate) struct Adjacency {
    start: Vec<u32>,
    edge: Vec<u32>,
}

impl Adjacency {
    /// Edges by source (`by_dst == false`) or by destination. Edges whose
    /// ends are out of range are left out.
    pub(crate) fn new(g: &Graph, by_dst: bool) -> Adjacency {
        let n = g.nodes.len();
        let key = |e: &Edge| if by_dst { e.dst } else { e.src };
        let valid = |e: &Edge| e.src < n && e.dst < n;
        let mut start = vec![0u32; n + 1];
        for e in g.edges.iter().filter(|e| valid(e)) {
            start[key(e) + 1] += 1;
        }
        for i in 0..n {
            start[i + 1] += start[i];
        }
        let mut fill = start.clone();
        let mut edge = vec![0u32; start[n] as usize];
        for (i, e) in g.edges.iter().enumerate().filter(|(_, e)| valid(e)) {
            let slot = &mut fill[key(e)];
            edge[*slot as usize] = i as u32;
            *slot += 1;
        }
        Adjacency { start, edge }
    }

    /// The edge indexes at `node`.
    #[inline]
    pub(crate) fn at(&self, node: usize) -> &[u32] {
        &self.edge[self.start[node] as usize..self.start[node + 1] as usize]
    }
}
