//! Words for people: the one-line title of a finding, the reference that
//! closes its loop, and an explanation with the fix that fits the kind of
//! reference (bound method, closure, frame, plain attribute).

use crate::kinds::{
    autograd_ctx, closure_name, hook_registration, is_frame_label, place, runtime_class, GENERATORS,
};
use crate::report::{Example, Step};

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

/// Why the tensors of `cycle` stay allocated and how to break the loop.
pub(crate) fn explanation(example: &Example, tensors: u64, held: u64) -> String {
    let cycle = &example.cycle[..];
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
    if let Some(i) = autograd_ctx(cycle) {
        s.push_str(&format!(
            "A custom `torch.autograd.Function` keeps a tensor it returned on its `ctx` \
             (`ctx{} = …` in `forward`): the output refers to its node through `grad_fn`, and \
             the node (`{}`) to the output. Save it with `ctx.save_for_backward(…)` instead \
             and read it back from `ctx.saved_tensors` in `backward`: PyTorch keeps a saved \
             output without the loop (and checks it was not changed in place).",
            step(i + 1).label,
            step(i + 1).type_name,
        ));
    } else if let Some((name, attrs)) = runtime_class(example) {
        s.push_str(&format!(
            "`{name}` is a class made while the program ran (a `class` statement inside a \
             function, or `type(…)`): a class refers to itself (its `__mro__`, its attribute \
             descriptors), so what it keeps as class attributes ({attrs}) is freed only when \
             the collector frees the class. Keep the tensors on an instance (`self.…`), or \
             define the class once, at module level.",
        ));
    } else if let Some((i, register)) = cycle
        .iter()
        .enumerate()
        .find_map(|(i, st)| hook_registration(&st.label).map(|r| (i, r)))
    {
        let holder = step(i);
        if holder.label.starts_with('.') {
            s.push_str(&format!(
                "A hook registered on `{}` (`{}`, by `{register}`) refers back to it. Keep the \
             handle the registration returns and call `handle.remove()` once the hook is done \
             with (or register it once, not at every step); inside the hook, use the object \
             PyTorch passes it as its first argument instead of capturing one, or capture a \
             weak reference (`ref = weakref.ref(obj)` outside, `ref()` inside).",
                holder.type_name,
                reference(&holder.type_name, &holder.label),
            ));
        } else {
            s.push_str(&format!(
                "A hook registered on the tensor (`{register}`) captures the tensor itself. On a \
                 tensor made by an operation (not a leaf), PyTorch keeps its hooks where Python's \
                 collector cannot follow them, and such a loop is never freed, not even by \
                 `gc.collect()`. Remove the hook with the handle `register_hook` returns \
                 (`handle.remove()`) once it has run, or let it capture what it needs (a number, \
                 a detached copy, `weakref.ref(tensor)`) instead of the tensor.",
            ));
        }
    } else if let Some(i) = cycle.iter().position(|st| {
        GENERATORS.contains(&st.type_name.as_str())
            && (st.label.starts_with("local ") || st.label.ends_with("_frame"))
    }) {
        let owner_at = (i + n - 1) % n;
        s.push_str(&format!(
            "A suspended {} stored at `{}` reads the object that stores it: its frame keeps \
             `{}` alive, and the object keeps the {0}. Create it where it is consumed (`for b in \
             obj.batches(): …`) instead of keeping it on the object, `close()` it when done with \
             (closing frees its frame: `{} = None` after `.close()`), or let it read a weak \
             reference. The collector breaks such a loop by closing the {0} before it frees \
             anything, so `vramscope.cycles.watch()` does not see it at a collection; \
             `vramscope.cycles.find([obj])` does, and `vramscope leaks` on a recording shows \
             the tensors freed inside collections.",
            step(i).type_name,
            place(cycle, owner_at, ""),
            step(i)
                .label
                .strip_prefix("local ")
                .map(|v| v.trim_matches(|c| c == '\'' || c == '"'))
                .unwrap_or("its locals"),
            place(cycle, owner_at, "obj"),
        ));
    } else if cycle
        .iter()
        .all(|st| st.label.starts_with("closure") || st.label == "cell_contents")
    {
        let names: Vec<String> = cycle
            .iter()
            .filter_map(|st| closure_name(&st.label))
            .map(|v| format!("`{v}`"))
            .collect();
        let names = if names.is_empty() {
            "a nested function".to_string()
        } else {
            names.join(", ")
        };
        s.push_str(&format!(
            "Only functions and their closure cells are on the loop: {names} is a nested \
             function that calls itself (or its neighbour), so it refers to itself through its \
             own closure cell, and each call of the enclosing function leaves one such loop \
             with every variable the nested function captures. Define it at module level and \
             pass what it uses as arguments, or `del {}` in the enclosing function once it is \
             done with (deleting the variable empties the cell).",
            cycle
                .iter()
                .find_map(|st| closure_name(&st.label))
                .unwrap_or("the function"),
        ));
    } else if let Some(i) = cycle.iter().position(|st| {
        st.type_name == "partial" && matches!(st.label.as_str(), "args" | "keywords" | "func")
    }) {
        let owner_at = (i + n - 1) % n;
        s.push_str(&format!(
            "A `functools.partial` stored at `{}` binds an object of this loop as one of its \
             arguments (`partial(f, self)`), so it refers back to the object that stores it. \
             Bind a weak reference instead (`partial(f, weakref.ref(self))`, dereferenced in \
             `f`), use `weakref.WeakMethod` for a method, or clear the attribute (`{} = None`) \
             once it is no longer needed.",
            place(cycle, owner_at, ""),
            place(cycle, owner_at, "obj"),
        ));
    } else if let Some(i) = find(&|l| l == "__self__") {
        let owner_at = (i + n - 1) % n;
        let method = step(i);
        s.push_str(&format!(
            "`{}` is a bound method stored on an object of this loop (`{}`), and the method \
             refers back to that object through `__self__`. Store a \
             `weakref.WeakMethod(obj.method)` instead and call it through the weak reference \
             (`m = ref(); m and m()`), or clear the attribute (`{} = None`) once the callback \
             is no longer needed.",
            method.type_name,
            place(cycle, owner_at, ""),
            place(cycle, owner_at, "obj"),
        ));
    } else if let Some(i) = find(&|l| l.starts_with("closure") || l == "cell_contents") {
        // The function is the step with the closure label (or the one
        // before the cell, when only `cell_contents` is named).
        let f = if cycle[i].label == "cell_contents" {
            i + n - 1
        } else {
            i
        };
        let owner_at = (f + n - 1) % n;
        let function = step(f);
        let var = closure_name(&step(f).label)
            .map(|v| format!("`{v}`"))
            .unwrap_or_else(|| "an object of this loop".into());
        s.push_str(&format!(
            "A closure (`{}`: a lambda or nested function) stored at `{}` captures {var}, and \
             its closure cell refers back to the object that stores it. Capture a weak \
             reference instead (`ref = weakref.ref(self)` outside, `ref()` inside the \
             function), or clear the attribute (`{} = None`) once it is no longer needed.",
            function.type_name,
            place(cycle, owner_at, ""),
            place(cycle, owner_at, "obj"),
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
