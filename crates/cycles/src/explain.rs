//! Words for people: the one-line title of a finding, the reference that
//! closes its loop, and an explanation with the fix that fits the kind of
//! reference (bound method, closure, frame, plain attribute).

use crate::report::Step;

pub use vramscope_text::units::{bytes, count};

/// `1 tensor`, `2 tensors`.
pub(crate) fn plural(n: u64, one: &str, many: &str) -> String {
    format!("{} {}", count(n), if n == 1 { one } else { many })
}

/// How `type_name` refers onwards through `label`, as code would write
/// it: `Node.other`, `dict['key']`, `method.__self__`,
/// `function closure 'self'`.
pub fn reference(type_name: &str, label: &str) -> String {
    let attr_like = !label.is_empty()
        && label.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        && !label.starts_with(|c: char| c.is_ascii_digit());
    if label.starts_with(['.', '[', '{']) {
        format!("{type_name}{label}")
    } else if attr_like {
        format!("{type_name}.{label}")
    } else {
        format!("{type_name} {label}")
    }
}

/// `Node.other → Node`: the last step of the cycle, back to its first.
pub(crate) fn closing_edge(cycle: &[Step]) -> String {
    match (cycle.last(), cycle.first()) {
        (Some(last), Some(first)) => format!(
            "{} → {}",
            reference(&last.type_name, &last.label),
            first.type_name
        ),
        _ => String::new(),
    }
}

/// `Node —.other→ Node —.other→ (cycle) holds 2 tensors, 40.00 KiB`.
pub(crate) fn title(cycle: &[Step], cycle_length: u64, tensors: u64, held: u64) -> String {
    let arrow = |s: &Step| format!("{} —{}→ ", s.type_name, s.label);
    let mut t = String::new();
    if cycle.len() <= 6 {
        cycle.iter().for_each(|s| t.push_str(&arrow(s)));
        t.push_str("(cycle)");
    } else {
        cycle[..3].iter().for_each(|s| t.push_str(&arrow(s)));
        t.push_str("… ");
        t.push_str(&arrow(&cycle[cycle.len() - 1]));
        t.push_str(&format!("(cycle of {})", count(cycle_length)));
    }
    format!(
        "{t} holds {}, {}",
        plural(tensors, "tensor", "tensors"),
        bytes(held)
    )
}

fn is_frame_label(l: &str) -> bool {
    matches!(
        l,
        "f_back"
            | "f_locals"
            | "f_func"
            | "tb_frame"
            | "tb_next"
            | "__traceback__"
            | "gi_frame"
            | "cr_frame"
            | "ag_frame"
            | "gi_yieldfrom"
            | "cr_await"
            | "ag_await"
    ) || l.starts_with("local ")
}

/// The closure variable's name in `closure 'name'`.
fn closure_name(label: &str) -> Option<&str> {
    let rest = label.strip_prefix("closure")?.trim();
    Some(rest.trim_matches(|c| c == '\'' || c == '"')).filter(|s| !s.is_empty())
}

/// Why the tensors of `cycle` stay allocated and how to break the loop.
pub(crate) fn explanation(cycle: &[Step], tensors: u64, held: u64) -> String {
    let n = cycle.len();
    if n == 0 {
        return String::new();
    }
    let step = |i: usize| &cycle[(i + n) % n];
    let mut s = format!(
        "These objects refer to each other in a loop, so their reference counts never reach \
         zero: the {} they hold ({}) are freed only when Python's cycle collector runs (an \
         automatic generation-2 collection or `gc.collect()`), possibly many steps later, and \
         until then their memory stays allocated. The loop closes with `{}`. ",
        plural(tensors, "tensor", "tensors"),
        bytes(held),
        closing_edge(cycle)
    );
    let find = |p: &dyn Fn(&str) -> bool| cycle.iter().position(|st| p(&st.label));
    if let Some(i) = find(&|l| l == "__self__") {
        let (method, owner) = (step(i), step(i + n - 1));
        s.push_str(&format!(
            "`{}` is a bound method stored on an object of this loop (`{}`), and the method \
             refers back to that object through `__self__`. Store a \
             `weakref.WeakMethod(obj.method)` instead and call it through the weak reference \
             (`m = ref(); m and m()`), or clear the attribute (`{} = None`) once the callback \
             is no longer needed.",
            method.type_name,
            reference(&owner.type_name, &owner.label),
            reference("obj", &owner.label),
        ));
    } else if let Some(i) = find(&|l| l.starts_with("closure") || l == "cell_contents") {
        // The function is the step with the closure label (or the one
        // before the cell, when only `cell_contents` is named).
        let f = if cycle[i].label == "cell_contents" {
            i + n - 1
        } else {
            i
        };
        let (function, owner) = (step(f), step(f + n - 1));
        let var = closure_name(&step(f).label)
            .map(|v| format!("`{v}`"))
            .unwrap_or_else(|| "an object of this loop".into());
        s.push_str(&format!(
            "A closure (`{}`: a lambda or nested function) stored at `{}` captures {var}, and \
             its closure cell refers back to the object that stores it. Capture a weak \
             reference instead (`ref = weakref.ref(self)` outside, `ref()` inside the \
             function), or clear the attribute (`{} = None`) once it is no longer needed.",
            function.type_name,
            reference(&owner.type_name, &owner.label),
            reference("obj", &owner.label),
        ));
    } else if find(&is_frame_label).is_some() {
        s.push_str(
            "A stack frame is on the loop: typically a caught exception that was kept \
             (`self.error = e`, or stored in a variable of the frame that raised it), whose \
             traceback refers to the frames and all their local variables. Keep `repr(e)` \
             instead, or drop the traceback (`e.__traceback__ = None`, `del e` at the end of \
             the `except` block).",
        );
    } else {
        s.push_str(&format!(
            "Break the loop at one reference: make the back-reference (here `{}`, or the \
             child's pointer to its parent) a `weakref.ref` or `weakref.proxy`, or set it to \
             `None` when the objects are done with.",
            reference(&step(n - 1).type_name, &step(n - 1).label)
        ));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words() {
        assert_eq!(bytes(40960), "40.00 KiB");
        assert_eq!(count(1234567), "1,234,567");
        assert_eq!(reference("Node", ".other"), "Node.other");
        assert_eq!(reference("method", "__self__"), "method.__self__");
        assert_eq!(
            reference("function", "closure 'self'"),
            "function closure 'self'"
        );
        assert_eq!(reference("dict", "['k']"), "dict['k']");
        assert_eq!(closure_name("closure 'self'"), Some("self"));
    }
}
