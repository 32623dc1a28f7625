//! What kind of reference a loop is made of, for the explanation to pick
//! its fix: a custom `autograd.Function`'s node, a hook dict, a class made
//! at run time, a frame; and where a reference leads, written from the
//! nearest object a reader can look up (`Sched.fns[0]`).

use crate::explain::reference;
use crate::report::{Example, Step};

pub(crate) fn is_frame_label(l: &str) -> bool {
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

/// The step on `grad_fn` to a custom `autograd.Function`'s node (a
/// `…Backward` class) whose next reference is an attribute its `ctx` set.
pub(crate) fn autograd_ctx(cycle: &[Step]) -> Option<usize> {
    let n = cycle.len();
    (0..n).find(|&i| {
        let next = &cycle[(i + 1) % n];
        cycle[i].label == "grad_fn"
            && next.type_name.ends_with("Backward")
            && next.label.starts_with('.')
    })
}

/// A class on the loop by the references every class has to itself (a
/// descriptor's `__objclass__`, its `__mro__`): its name (the graph names
/// a class `class Registry`), and the class attributes that lead to the
/// tensors (`` `Registry.table` ``).
pub(crate) fn runtime_class(example: &Example) -> Option<(String, String)> {
    let cycle = &example.cycle;
    if !cycle
        .iter()
        .any(|st| st.label == "__objclass__" || st.label == "__mro__")
    {
        return None;
    }
    let (class, name) = cycle
        .iter()
        .find_map(|st| Some((st.node, st.type_name.strip_prefix("class ")?)))?;
    let mut attrs: Vec<String> = Vec::new();
    for first in example.paths.iter().filter_map(|p| p.first()) {
        if first.node == class && first.label.starts_with('.') {
            let a = format!("`{name}{}`", first.label);
            if !attrs.contains(&a) {
                attrs.push(a);
            }
        }
    }
    let attrs = if attrs.is_empty() {
        "its attributes".to_string()
    } else {
        attrs.join(", ")
    };
    Some((name.to_string(), attrs))
}

/// The registration that fills a hook dict, by the dict's attribute: a
/// module's (`._forward_hooks`), a tensor's (`_backward_hooks`) or an
/// optimizer's.
pub(crate) fn hook_registration(label: &str) -> Option<&'static str> {
    Some(match label {
        "._forward_hooks" => "register_forward_hook",
        "._forward_pre_hooks" => "register_forward_pre_hook",
        "._backward_hooks" => "register_full_backward_hook",
        "._backward_pre_hooks" => "register_full_backward_pre_hook",
        "._state_dict_hooks" => "register_state_dict_post_hook",
        "._state_dict_pre_hooks" => "register_state_dict_pre_hook",
        "._load_state_dict_pre_hooks" => "register_load_state_dict_pre_hook",
        "._load_state_dict_post_hooks" => "register_load_state_dict_post_hook",
        "_backward_hooks" => "Tensor.register_hook",
        "_post_accumulate_grad_hooks" => "register_post_accumulate_grad_hook",
        "._optimizer_step_pre_hooks" => "register_step_pre_hook",
        "._optimizer_step_post_hooks" => "register_step_post_hook",
        _ => return None,
    })
}

/// Where step `at`'s reference leads, written from the nearest object
/// that is not a plain container: `Sched.fns[0]` rather than `list[0]`
/// (a list is no place a reader can look up). `root` is `"obj"` for a line
/// of code to write, else the path starts with the object's type.
pub(crate) fn place(cycle: &[Step], at: usize, root: &str) -> String {
    let n = cycle.len();
    let mut chain = vec![at]; // innermost first
    let mut i = at;
    while chain.len() < n
        && CONTAINERS.contains(&cycle[i].type_name.as_str())
        && cycle[i].label.starts_with('[')
    {
        i = (i + n - 1) % n;
        chain.push(i);
    }
    let outer = i;
    let head = if root == "obj" {
        "obj"
    } else {
        cycle[outer].type_name.as_str()
    };
    let mut out = reference(head, &cycle[outer].label);
    for &j in chain.iter().rev().skip(1) {
        out.push_str(&cycle[j].label);
    }
    out
}

/// The types whose suspended frame is part of the object.
pub(crate) const GENERATORS: [&str; 3] = ["generator", "coroutine", "async_generator"];

/// Containers whose entries are reached by index or key: a reader finds
/// them through the attribute that holds them.
pub(crate) const CONTAINERS: [&str; 6] = [
    "list",
    "dict",
    "tuple",
    "OrderedDict",
    "deque",
    "defaultdict",
];

/// The closure variable's name in `closure 'name'`.
pub(crate) fn closure_name(label: &str) -> Option<&str> {
    let rest = label.strip_prefix("closure")?.trim();
    Some(rest.trim_matches(|c| c == '\'' || c == '"')).filter(|s| !s.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn steps(spec: &[(&str, &str)]) -> Vec<Step> {
        spec.iter()
            .enumerate()
            .map(|(node, (t, l))| Step {
                node,
                type_name: t.to_string(),
                label: l.to_string(),
            })
            .collect()
    }

    #[test]
    fn a_place_is_written_from_the_object_that_is_not_a_container() {
        let c = steps(&[
            ("Sched", ".fns"),
            ("list", "[0]"),
            ("function", "closure 'self'"),
            ("cell", "cell_contents"),
        ]);
        assert_eq!(place(&c, 1, ""), "Sched.fns[0]");
        assert_eq!(place(&c, 1, "obj"), "obj.fns[0]");
        assert_eq!(place(&c, 0, ""), "Sched.fns");
        // A loop of containers only ends where it began.
        let d = steps(&[("dict", "['self']")]);
        assert_eq!(place(&d, 0, ""), "dict['self']");
    }
}
