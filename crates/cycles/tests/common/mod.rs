//! Building garbage graphs for the tests.
#![allow(dead_code)]

use vramscope_cycles::{Edge, Graph, NodeInfo, TensorInfo};

/// 512 × 10 float32.
pub const TENSOR_BYTES: u64 = 20480;

#[derive(Default)]
pub struct Builder {
    pub g: Graph,
}

impl Builder {
    pub fn new() -> Builder {
        Builder::default()
    }

    pub fn obj(&mut self, ty: &str, repr: &str) -> usize {
        self.g.nodes.push(NodeInfo {
            type_name: ty.into(),
            module: "__main__".into(),
            repr: repr.into(),
            tensor: None,
        });
        self.g.nodes.len() - 1
    }

    pub fn builtin(&mut self, ty: &str) -> usize {
        let i = self.obj(ty, &format!("<{ty}>"));
        self.g.nodes[i].module = "builtins".into();
        i
    }

    pub fn tensor_of(&mut self, shape: &[u64], bytes: u64) -> usize {
        self.g.nodes.push(NodeInfo {
            type_name: "Tensor".into(),
            module: "torch".into(),
            repr: format!("tensor(shape={shape:?})"),
            tensor: Some(TensorInfo {
                shape: shape.to_vec(),
                dtype: "torch.float32".into(),
                device: "cuda:0".into(),
                bytes,
                requires_grad: true,
                grad_fn: Some("MulBackward0".into()),
                stack: vec!["train.py:12 in step".into(), "train.py:40 in main".into()],
                storage: None,
            }),
        });
        self.g.nodes.len() - 1
    }

    pub fn tensor(&mut self) -> usize {
        self.tensor_of(&[512, 10], TENSOR_BYTES)
    }

    pub fn edge(&mut self, src: usize, dst: usize, label: &str) {
        self.g.edges.push(Edge {
            src,
            dst,
            label: label.into(),
        });
    }

    /// Two `Node`s referring to each other through `.other`, each holding
    /// a tensor through `.value`; with `dicts`, through their `__dict__`.
    pub fn node_pair(&mut self, dicts: bool) {
        let (a, b) = (self.obj("Node", "<Node a>"), self.obj("Node", "<Node b>"));
        let (ta, tb) = (self.tensor(), self.tensor());
        if dicts {
            let (da, db) = (self.builtin("dict"), self.builtin("dict"));
            self.edge(a, da, "__dict__");
            self.edge(b, db, "__dict__");
            self.edge(da, b, "['other']");
            self.edge(db, a, "['other']");
            self.edge(da, ta, "['value']");
            self.edge(db, tb, "['value']");
        } else {
            self.edge(a, b, ".other");
            self.edge(b, a, ".other");
            self.edge(a, ta, ".value");
            self.edge(b, tb, ".value");
        }
    }
}
