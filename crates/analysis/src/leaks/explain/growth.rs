//! The growth finding in words: memory that grows every iteration, the
//! line that keeps it, what holds it, and the fix (the accumulation
//! rewritten to keep a number, the holder cleared, the graph of an
//! evaluation call not kept).

use super::{evidence_list, first_files, short_file};
use crate::leaks::findings::{Context, SiteSeries};
use crate::leaks::source::Sources;
use crate::leaks::{Finding, FindingKind, Severity, SiteEvidence};
use vramscope_text::units::bytes;

pub(in crate::leaks) fn growth_finding(
    ctx: &Context,
    sites: &[(u32, f64)],
    series: &SiteSeries,
    src: &mut Sources,
) -> Finding {
    let per: f64 = sites.iter().map(|s| s.1).sum();
    let mut ev = evidence_list(ctx, sites, (true, sites.len() == 1), series, src);
    // Several sites growing together, or activations no line stores: a
    // kept graph, named when the recorder saw one grow.
    let graph_like = sites.len() >= 2 || graph_of_a_module_call(&ev[0]);
    if graph_like && ev.iter().all(|e| e.held_by.is_none()) {
        let graph = ctx.holders.growing_graph(&first_files(&ev), src);
        ev[0].held_by = graph;
    }
    let ev = ev;
    let n = ctx.complete;
    let first = &ev[0];
    let path = first
        .leaking_path
        .as_ref()
        .map(|(kept, freed)| {
            format!(" The blocks that stay were allocated through {kept}; those the same line allocated through {freed} were freed.")
        })
        .unwrap_or_default();
    let total: u64 = ev
        .iter()
        .map(|e| e.live_bytes.last().copied().unwrap_or(0))
        .sum();
    let outliving: u64 = ev.iter().map(|e| e.outliving_blocks).sum();
    let in_forward = ev.iter().any(|e| {
        e.stack
            .iter()
            .any(|f| f.contains(" in forward") || f.contains("torch/nn/modules/"))
    });
    let held = ev.iter().find_map(|e| e.held_by.as_ref());
    let held_title = held
        .map(|h| format!(", held by `{}`", h.name))
        .unwrap_or_default();
    if sites.len() >= 2 {
        let names: Vec<&str> = ev.iter().map(|e| e.site.as_str()).collect();
        let why = match held {
            Some(h) => format!("Of the first site's tensors, {}.", h.text),
            None => format!(
                "Sites that grow together are usually one autograd graph per iteration kept alive: a tensor that requires grad is stored across iterations{}, and its graph holds the activations saved for backward.",
                if in_forward { " (they were created in forward)" } else { "" }
            ),
        };
        // A named holder that keeps the tensors themselves (a list of
        // exceptions holding batches and outputs) is growth; a graph only
        // when what was seen to grow is one.
        let kind = match held {
            Some(h) if !h.through_graph => FindingKind::Growth,
            _ => FindingKind::RetainedGraph,
        };
        Finding {
            kind,
            severity: Severity::Leak,
            title: format!("{} allocation sites grow together, {} per iteration{held_title}", sites.len(), bytes(per as u64)),
            explanation: format!(
                "Tensors from {} sites ({}) are allocated in every iteration and never freed: {} more at the end of each iteration, {} by the end of iteration {n}; {outliving} tensors outlived the iteration after theirs. {why}",
                sites.len(),
                names.join(", "),
                bytes(per as u64),
                bytes(total),
            ),
            fix: held_fix(held).unwrap_or_else(|| "Accumulate `loss.item()` (or `loss.detach()`) instead of `loss` (`total_loss += loss` keeps every graph), store `.detach()`ed outputs, and run evaluation under `torch.inference_mode()` (or `torch.no_grad()`).".into()),
            bytes_per_iteration: per,
            bytes: total,
            iterations: (1, n),
            sites: ev,
        }
    } else if graph_of_a_module_call(first) {
        let why = match held {
            Some(h) => format!("The call is not in a `forward`; {}.", h.text),
            None => "The call is not in a `forward`, and no line near it stores its outputs: a result computed from them that requires grad is probably kept across iterations (`self.total = self.total + ...`), and its autograd graph holds every iteration's activations.".to_owned(),
        };
        Finding {
            kind: FindingKind::RetainedGraph,
            severity: Severity::Leak,
            title: format!("{} grows by {} per iteration{held_title}", first.site, bytes(per as u64)),
            explanation: format!(
                "The activations of the module call at {} are kept from one iteration to the next: {} more at the end of each iteration, {} by the end of iteration {n}; {} of them outlived the iteration after theirs.{path} {why}",
                first.site,
                bytes(per as u64),
                bytes(total),
                first.outliving_blocks,
            ),
            fix: held_fix(held).unwrap_or_else(|| "Accumulate `.item()` (or `.detach()`) of the result instead of the tensor, and run evaluation under `torch.inference_mode()` (or `torch.no_grad()`), so that no graph is built.".into()),
            bytes_per_iteration: per,
            bytes: total,
            iterations: (1, n),
            sites: ev,
        }
    } else {
        let keeper = first
            .kept_by
            .as_ref()
            .map(|(line, code)| {
                let verb = if ctx.function_lines {
                    "probably stores it"
                } else {
                    "stores it"
                };
                format!(" {} {verb}: `{code}`.", kept_at(first, *line))
            })
            .unwrap_or_default();
        let code = first
            .code
            .as_ref()
            .map(|c| format!(" (`{c}`)"))
            .unwrap_or_default();
        let why = match held {
            Some(h) if h.through_graph => format!(" Of them, {}.", h.text),
            Some(h) => format!(" They are {}.", h.text),
            None => " Something holds a reference to them across iterations: a list that is appended to, an attribute, a dict or a closure.".to_owned(),
        };
        let keeper = if held.is_some_and(|h| h.stored_at.is_some()) {
            String::new()
        } else {
            keeper
        };
        let code_quote = &code;
        if let Some((line, hook)) = first
            .kept_by
            .as_ref()
            .filter(|k| held.is_none() && crate::leaks::source::tensor_hook_call(&k.1).is_some())
        {
            return Finding {
                kind: FindingKind::Growth,
                severity: Severity::Leak,
                title: format!("{} grows by {} per iteration: a hook on the tensor refers to it", first.site, bytes(per as u64)),
                explanation: format!(
                    "The tensors allocated at {}{code_quote} are never freed: {} more are alive at the end of each iteration, {} by the end of iteration {n}. {} registers a hook on the tensor that refers to the tensor itself: `{}`. On a tensor made by an operation PyTorch keeps its hooks where Python's collector cannot follow them, so the tensor and its autograd graph are never freed, not even by `gc.collect()`.",
                    first.site,
                    bytes(per as u64),
                    bytes(total),
                    kept_at(first, *line),
                    without_comment(hook),
                ),
                fix: "Keep the handle the registration returns and remove the hook once it has run (`h = t.register_hook(...)`, then `h.remove()`), or let the hook capture what it needs computed beforehand (a number) instead of the tensor.".into(),
                bytes_per_iteration: per,
                bytes: total,
                iterations: (1, n),
                sites: ev,
            };
        }
        if let Some(code) = host_copy_on_the_cpu(ctx, held, first.kept_by.as_ref()) {
            let holder = held.map_or_else(|| "a list".to_owned(), |h| format!("`{}`", h.name));
            return Finding {
                kind: FindingKind::Growth,
                severity: Severity::Benign,
                title: format!("{} grows by {} per iteration in host copies ({holder}), on the CPU", first.site, bytes(per as u64)),
                explanation: format!(
                    "The tensors allocated at {}{code_quote} are kept from one iteration to the next ({} more at the end of each iteration, {} by the end of iteration {n}), stored as host copies: `{code}`. This recording is of the CPU, where `.cpu()` returns the tensor itself, so the copies are counted as the device's memory; on a GPU they are in the host's memory and the device does not grow.{why}",
                    first.site,
                    bytes(per as u64),
                    bytes(total),
                    code_quote = code_quote,
                    why = held.map(|h| format!(" They are {}.", h.text)).unwrap_or_default(),
                ),
                fix: format!("Nothing to change for the device. The process's own memory grows with {holder}: keep a number or a running statistic instead if the run is long, or clear it once it has been used."),
                bytes_per_iteration: 0.0,
                bytes: total,
                iterations: (1, n),
                sites: ev,
            };
        }
        Finding {
            kind: FindingKind::Growth,
            severity: Severity::Leak,
            title: format!("{} grows by {} per iteration{held_title}", first.site, bytes(per as u64)),
            explanation: format!(
                "The tensors allocated at {}{code} are kept from one iteration to the next: {} more are alive at the end of each iteration, {} by the end of iteration {n}; {} of them outlived the iteration after theirs.{path}{keeper}{why}",
                first.site,
                bytes(per as u64),
                bytes(total),
                first.outliving_blocks,
            ),
            fix: if let Some(f) = held_fix(held) {
                f
            } else if first.kept_by.as_ref().is_some_and(|k| k.1.contains(".append(")) {
                "Do not keep the tensor itself: append `x.detach()` (or `x.detach().cpu()`, or `x.item()` for a scalar), and clear the list once it has been used.".into()
            } else if in_forward {
                "Do not store tensors from `forward` on the module or in lists: keep `x.detach()` (or `.cpu()`/`.item()`) if it is for logging, and drop the reference at the end of the iteration.".into()
            } else {
                "Drop the reference at the end of the iteration, or keep `x.detach().cpu()` / `x.item()` instead of the tensor.".into()
            },
            bytes_per_iteration: per,
            bytes: total,
            iterations: (1, n),
            sites: ev,
        }
    }
}

/// The line that stores the tensors, when it stores host copies
/// (`kept.append(out.detach().cpu())`) and the recording is of the CPU:
/// there `.cpu()` is the tensor itself, and what the list keeps is counted
/// as the device's memory, which on a GPU it would not be.
pub(super) fn host_copy_on_the_cpu(
    ctx: &Context,
    held: Option<&crate::leaks::holders::HeldBy>,
    kept_by: Option<&(u32, String)>,
) -> Option<String> {
    let on_cpu = ctx
        .snap
        .source
        .recorder
        .as_ref()
        .is_some_and(|r| r.device_kind() == "cpu");
    if !on_cpu {
        return None;
    }
    let code = held
        .and_then(|h| h.stored_at.as_ref().map(|s| s.2.as_str()))
        .or(kept_by.map(|k| k.1.as_str()))?;
    let host = [".cpu()", ".to(\"cpu\")", ".to('cpu')", ".numpy()"];
    host.iter()
        .any(|m| code.contains(m))
        .then(|| without_comment(code).to_owned())
}

/// The fix, worded for the holder the recorder found and the line that
/// stores into it.
fn held_fix(held: Option<&crate::leaks::holders::HeldBy>) -> Option<String> {
    let h = held?;
    let line = h
        .stored_at
        .as_ref()
        .map(|(_, _, code)| format!(" (`{code}`)"))
        .unwrap_or_default();
    let name = &h.name;
    let hook = h
        .stored_at
        .as_ref()
        .is_some_and(|(_, _, code)| code.contains("register_") && code.contains("hook("));
    // `functools.lru_cache` / `functools.cache`: the wrapper's own dict,
    // which keeps every argument and result; no line of the program
    // stores into it.
    let memo = h.type_name.contains("lru_cache");
    // Functions kept in the holder that reach the tensors through their
    // closure cells or default arguments (`lambda o=out: ...`).
    let through_functions = h.path.contains("__defaults__") || h.path.contains(".closure '");
    Some(if memo {
        format!("`{name}` is memoised (`functools.lru_cache` or `functools.cache`): its cache keeps the arguments and results of every call, and a tensor is a new key at every call. Do not memoise on tensors (key on a number, a shape or an id you control), or bound it (`@lru_cache(maxsize=...)`), or call `{name}.cache_clear()` once the results have been used.")
    } else if through_functions && !hook {
        let holder = h.path.split("[*]").next().unwrap_or(name);
        format!("The functions kept in `{holder}`{line} hold the tensors through their closures or default arguments: give them what they need as numbers (`.item()`) or `.detach().cpu()` copies, or run and clear them every iteration (`{holder}.clear()`).")
    } else if hook {
        // The hook stores into the holder, and a line that registers it runs
        // in the loop: every iteration adds one more hook, each storing.
        format!("The line that stores into `{name}` registers a hook{line}: if it runs every iteration, each adds one more hook. Register it once before the loop (or keep the handle it returns and call `handle.remove()` when done), and store `o.detach().cpu()` (or a statistic) in `{name}`, cleared once used.")
    } else if h.through_graph {
        let rewrite = h
            .stored_at
            .as_ref()
            .and_then(|(_, _, code)| with_item(code, name))
            .map(|r| format!(": `{r}`"))
            .unwrap_or_else(|| ": accumulate `.item()` (or `.detach()`) of the result".to_owned());
        format!("Keep a number in `{name}`, not a tensor with its graph{line}{rewrite}, and run evaluation under `torch.inference_mode()` (or `torch.no_grad()`) so that no graph is built.")
    } else if h.kind == "exception" || h.path.contains("__traceback__") {
        format!("Do not keep the exception in `{name}`{line}: its traceback holds the frames and their tensors; keep `str(err)` or `traceback.format_exc()`, or `del` it once handled.")
    } else if h.path.contains("[*]") {
        format!("Do not keep the tensors themselves in `{}`{line}: store `x.item()` for a scalar, or `x.detach().cpu()`, and clear it when it has been used (or bound its size).", h.path.split("[*]").next().unwrap_or(name))
    } else {
        format!("Drop the reference in `{}`{line} at the end of the iteration (`del` it, or assign `None`), or keep `x.detach().cpu()` / `x.item()` instead of the tensor.", h.path)
    })
}

/// Where the line `kept_by` names is: `Line 7 of train.py`, or in a
/// caller (`kept_in`), `In its caller (train.py:40 in step), line 42`.
fn kept_at(first: &SiteEvidence, line: u32) -> String {
    match first.kept_in.as_deref() {
        Some(caller) => format!("In its caller ({caller}), line {line}"),
        None => format!("Line {line} of {}", short_file(&first.file)),
    }
}

/// A line of code without its trailing comment.
fn without_comment(code: &str) -> &str {
    code.split(" #").next().unwrap_or(code).trim()
}

/// `total += loss` -> `total += loss.item()`; `t = t + f(x)` ->
/// `t = t + (f(x)).item()`: the accumulation rewritten to keep a number.
fn with_item(code: &str, name: &str) -> Option<String> {
    let code = without_comment(code);
    // `costs.append(cost)` -> `costs.append(cost.item())`.
    if let Some(arg) = code
        .strip_prefix(name)
        .and_then(|r| r.strip_prefix(".append("))
        .and_then(|r| r.strip_suffix(')'))
        .map(str::trim)
        .filter(|a| !a.is_empty() && !a.contains(['(', ')', ',', '#']))
    {
        return Some(format!("{name}.append({})", item_of(arg)));
    }
    let (lhs, op, rhs) = if let Some((l, r)) = code.split_once("+=") {
        (l.trim(), "+=", r.trim())
    } else {
        let (l, r) = code.split_once('=')?;
        let r = r.trim();
        let rest = r.strip_prefix(name)?.trim_start().strip_prefix('+')?;
        (l.trim(), "= ", rest.trim())
    };
    if lhs != name || rhs.is_empty() || rhs.contains('#') {
        return None;
    }
    let item = item_of(rhs);
    Some(if op == "+=" {
        format!("{name} += {item}")
    } else {
        format!("{name} = {name} + {item}")
    })
}

/// `x.item()`, or `(a + b).item()` for an expression.
fn item_of(expr: &str) -> String {
    let simple = expr
        .chars()
        .all(|c| c.is_alphanumeric() || c == '_' || c == '.');
    if simple {
        format!("{expr}.item()")
    } else {
        format!("({expr}).item()")
    }
}

/// Activations made by a module called from outside any `forward` (an
/// evaluation loop, a validator), growing with no line of the program
/// storing them: an autograd graph kept across iterations holds them.
fn graph_of_a_module_call(e: &SiteEvidence) -> bool {
    let user = e.site.split(" → ").next().unwrap_or("");
    e.category == Some(crate::categories::Category::Activation)
        && e.kept_by.is_none()
        && e.held_by.as_ref().is_none_or(|h| h.through_graph)
        && !user.ends_with(" in forward")
        && e.stack.iter().any(|f| f.contains("torch/nn/modules/"))
}

#[cfg(test)]
mod tests {
    use super::with_item;

    #[test]
    fn accumulations_rewritten_to_keep_numbers() {
        assert_eq!(
            with_item("total_loss += loss", "total_loss").as_deref(),
            Some("total_loss += loss.item()")
        );
        assert_eq!(
            with_item("total = total + model(x).sum()", "total").as_deref(),
            Some("total = total + (model(x).sum()).item()")
        );
        assert_eq!(
            with_item("total_loss += val_loss  # the bug", "total_loss").as_deref(),
            Some("total_loss += val_loss.item()")
        );
        assert_eq!(with_item("other += loss", "total"), None);
        assert_eq!(with_item("total = loss", "total"), None);
        // A list of kept tensors with their graphs (a WGAN-GP's critic
        // costs): the number appended instead.
        assert_eq!(
            with_item("disc_costs.append(D_cost)", "disc_costs").as_deref(),
            Some("disc_costs.append(D_cost.item())")
        );
        assert_eq!(
            with_item("costs.append(a - b)", "costs").as_deref(),
            Some("costs.append((a - b).item())")
        );
        assert_eq!(with_item("costs.append(f(x))", "costs"), None);
        assert_eq!(with_item("other.append(x)", "costs"), None);
    }
}
