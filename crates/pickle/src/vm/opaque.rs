//! Constructs that would execute code under `pickle.load` (imports,
//! calls, object construction): kept as inert values and described for
//! [`Document::skipped`](crate::Document::skipped).

use super::*;

impl<'i> Vm<'i> {
    // ----- opaque constructs -----

    pub(super) fn push_global(&mut self, module: String, name: String) {
        let what = format!("import {module}.{name}");
        self.push_opaque(Opaque::Global { module, name }, what);
    }

    pub(super) fn push_opaque(&mut self, o: Opaque, what: String) {
        self.b.record_skipped(self.op_start as u64, what);
        let v = self.b.opaque(o);
        self.stack.push(v);
    }

    pub(super) fn describe(&self, v: Value) -> String {
        match self.b.doc().get(v) {
            Val::Opaque(Opaque::Global { module, name }) => {
                format!("{}.{}", clip(module), clip(name))
            }
            Val::Opaque(_) => "an unconstructed object".into(),
            other => format!("a {}", other.type_name()),
        }
    }

    /// `('rm -rf ~',)` → `("rm -rf ~")`: enough to tell a reader what a
    /// malicious file wanted, cut to a readable length.
    pub(super) fn describe_args(&self, args: Value) -> String {
        let doc = self.b.doc();
        let Some(c) = args.container() else {
            return "(...)".into();
        };
        let mut parts = Vec::new();
        for item in doc.items(c).take(3) {
            parts.push(match doc.get(item) {
                Val::Str(s) => {
                    let mut s: String = s.chars().take(80).collect();
                    s = format!("{s:?}");
                    s
                }
                Val::Int(i) => i.to_string(),
                other => other.type_name().to_string(),
            });
        }
        if doc.len(c) > 3 {
            parts.push("...".into());
        }
        format!("({})", parts.join(", "))
    }
}
