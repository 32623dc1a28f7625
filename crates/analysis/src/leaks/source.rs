//! The user's source code, when it is on this machine: the line of an
//! allocation site, and the line that probably keeps its tensor alive.
//!
//! A snapshot knows where a tensor was *created*, not what refers to it. When
//! the file is readable, the function around the site often tells: the site
//! assigns `h = ...`, and a few lines later `self.features.append(h)`.

use std::path::{Path, PathBuf};

use vramscope_snapshot::hash::FxHashMap as HashMap;

/// Larger files are not read.
const MAX_SOURCE_BYTES: u64 = 4 << 20;

/// Reads and caches source files, looked up as given, then under each root.
#[derive(Debug, Default)]
pub struct Sources {
    roots: Vec<PathBuf>,
    cache: HashMap<String, Option<Vec<String>>>,
}

impl Sources {
    pub fn new(roots: Vec<PathBuf>) -> Sources {
        Sources {
            roots,
            cache: HashMap::default(),
        }
    }

    fn lines(&mut self, file: &str) -> Option<&[String]> {
        if file.is_empty() || file.starts_with('<') {
            return None;
        }
        if !self.cache.contains_key(file) {
            let read = |p: &Path| -> Option<Vec<String>> {
                let meta = std::fs::metadata(p).ok()?;
                if !meta.is_file() || meta.len() > MAX_SOURCE_BYTES {
                    return None;
                }
                let bytes = std::fs::read(p).ok()?;
                Some(
                    String::from_utf8_lossy(&bytes)
                        .lines()
                        .map(str::to_owned)
                        .collect(),
                )
            };
            let direct = Path::new(file);
            let found = read(direct).or_else(|| {
                if direct.is_absolute() {
                    return None;
                }
                self.roots.iter().find_map(|r| read(&r.join(direct)))
            });
            self.cache.insert(file.to_owned(), found);
        }
        self.cache.get(file)?.as_deref()
    }

    /// Line `line` (1-based) of `file`, trimmed.
    pub fn line(&mut self, file: &str, line: u32) -> Option<String> {
        let lines = self.lines(file)?;
        let l = lines.get((line as usize).checked_sub(1)?)?;
        Some(l.trim().to_owned())
    }

    /// A line after `line`, in the same function, that stores the variable
    /// assigned at `line` somewhere that outlives the call: appended to a
    /// list, put into a container or an attribute. `(line number, code)`.
    pub fn keeper(&mut self, file: &str, line: u32) -> Option<(u32, String)> {
        let lines = self.lines(file)?;
        let at = (line as usize).checked_sub(1)?;
        let site = lines.get(at)?;
        if stores(site, None) {
            return Some((line, site.trim().to_owned()));
        }
        let t = site.trim_start();
        if t.starts_with("def ") || t.starts_with("async def ") {
            // Profilers report a function's first line: look through its body
            // for a call that stores something.
            let indent = indentation(site);
            for (k, l) in lines.iter().enumerate().skip(at + 1) {
                if l.trim().is_empty() {
                    continue;
                }
                if indentation(l) <= indent {
                    break;
                }
                if stores(l, None) {
                    return Some((k as u32 + 1, l.trim().to_owned()));
                }
            }
            return None;
        }
        let name = assigned_name(site)?;
        let indent = indentation(site);
        // The enclosing `def`: the nearest line above with less indentation
        // that starts a function.
        let def_indent = lines[..at]
            .iter()
            .rev()
            .find(|l| {
                let t = l.trim_start();
                indentation(l) < indent && (t.starts_with("def ") || t.starts_with("async def "))
            })
            .map(|l| indentation(l))?;
        for (k, l) in lines.iter().enumerate().skip(at + 1) {
            if l.trim().is_empty() {
                continue;
            }
            if indentation(l) <= def_indent {
                break;
            }
            if stores(l, Some(&name)) {
                return Some((k as u32 + 1, l.trim().to_owned()));
            }
        }
        None
    }
}

impl Sources {
    /// The first line of `file` that stores into `target`: a variable
    /// (`losses.append(x)`, `cache[k] = x`, `total += x`, `total = total + x`)
    /// or, with `attribute`, an attribute (`self.cache[k] = h`,
    /// `self.history.append(h)`). Failing that, the first assignment of
    /// something other than an empty value (`last_error = e`).
    /// `(line number, code)`.
    pub fn store_into(
        &mut self,
        file: &str,
        target: &str,
        attribute: bool,
    ) -> Option<(u32, String)> {
        self.store_into_within(file, target, attribute, None)
    }

    /// [`Sources::store_into`] within the function running at `line` (a
    /// local variable is stored into in its own function only).
    pub fn store_into_function(
        &mut self,
        file: &str,
        line: u32,
        function: &str,
        target: &str,
    ) -> Option<(u32, String)> {
        let lines = self.lines(file)?;
        let at = (line as usize).checked_sub(1)?;
        let indent = indentation(lines.get(at)?);
        // The function's own `def` (a qualified name's last part): a nested
        // function defined above the running line is not it.
        let name = function.rsplit('.').next().unwrap_or(function);
        let def = lines[..at].iter().rposition(|l| {
            let t = l.trim_start();
            let t = t.strip_prefix("async ").unwrap_or(t);
            indentation(l) < indent
                && t.strip_prefix("def ").is_some_and(|rest| {
                    name.is_empty()
                        || rest
                            .strip_prefix(name)
                            .is_some_and(|r| r.trim_start().starts_with('('))
                })
        })?;
        let def_indent = indentation(&lines[def]);
        let end = lines[def + 1..]
            .iter()
            .position(|l| !l.trim().is_empty() && indentation(l) <= def_indent)
            .map_or(lines.len(), |p| def + 1 + p);
        self.store_into_within(file, target, false, Some((def + 1, end)))
    }

    fn store_into_within(
        &mut self,
        file: &str,
        target: &str,
        attribute: bool,
        range: Option<(usize, usize)>,
    ) -> Option<(u32, String)> {
        let lines = self.lines(file)?;
        let (from, to) = range.unwrap_or((0, lines.len()));
        let mut plain = None;
        let mut in_doc = false;
        for (k, l) in lines.iter().enumerate().take(to).skip(from) {
            let t = l.trim();
            // Docstrings quote code; they store nothing.
            let quotes = t.matches("\"\"\"").count() + t.matches("'''").count();
            let was_doc = in_doc;
            if quotes % 2 == 1 {
                in_doc = !in_doc;
            }
            if was_doc || quotes > 0 || t.starts_with('#') || !t.contains(target) {
                continue;
            }
            for (i, _) in t.match_indices(target) {
                if !word_boundary(t, i, target.len()) {
                    continue;
                }
                let dotted = t[..i].ends_with('.');
                if dotted != attribute {
                    continue;
                }
                let rest = t[i + target.len()..].trim_start();
                match store_kind(rest, target) {
                    Store::Into => return Some((k as u32 + 1, t.to_owned())),
                    Store::Plain if plain.is_none() => plain = Some((k as u32 + 1, t.to_owned())),
                    _ => {}
                }
            }
        }
        plain
    }
}

enum Store {
    /// Into a container, or accumulated.
    Into,
    /// A plain assignment of something that is not empty.
    Plain,
    No,
}

/// What the code after a mention of `target` does to it.
fn store_kind(rest: &str, target: &str) -> Store {
    const CALLS: [&str; 8] = [
        ".append(",
        ".extend(",
        ".insert(",
        ".add(",
        ".appendleft(",
        ".setdefault(",
        ".update(",
        ".put(",
    ];
    if CALLS.iter().any(|c| rest.starts_with(c)) {
        return Store::Into;
    }
    if rest.starts_with("+=") || rest.starts_with("|=") {
        return Store::Into;
    }
    if rest.starts_with('[') {
        // `x[k] = v` (not `x[k] == v`): the first `=` after the closing
        // bracket; `x[k].append(v)`, `x[k][j] += v`: a call or an
        // accumulation into what the indices reach.
        let mut r = rest;
        while let Some(inner) = r.strip_prefix('[') {
            let Some(close) = inner.find(']') else {
                return Store::No;
            };
            r = inner[close + 1..].trim_start();
        }
        let into = (r.starts_with('=') && !r.starts_with("=="))
            || r.starts_with("+=")
            || r.starts_with("|=")
            || CALLS.iter().any(|c| r.starts_with(c));
        return if into { Store::Into } else { Store::No };
    }
    if let Some(rhs) = rest.strip_prefix('=') {
        if rhs.starts_with('=') {
            return Store::No;
        }
        let accumulates = rhs
            .match_indices(target)
            .any(|(i, _)| word_boundary(rhs, i, target.len()));
        if accumulates {
            return Store::Into;
        }
        let v = rhs.trim();
        let empty = matches!(
            v,
            "[]" | "{}" | "()" | "None" | "0" | "0.0" | "list()" | "dict()" | "set()" | "deque()"
        ) || v.starts_with("collections.deque(") && v.ends_with("()");
        return if empty { Store::No } else { Store::Plain };
    }
    Store::No
}

fn indentation(l: &str) -> usize {
    l.len() - l.trim_start().len()
}

/// `h = ...` / `h: Tensor = ...` → `h` (not `==`, not `a.b = `).
fn assigned_name(l: &str) -> Option<String> {
    let t = l.trim_start();
    let end = t.find(|c: char| !(c.is_alphanumeric() || c == '_'))?;
    let (name, rest) = t.split_at(end);
    if name.is_empty() || name.chars().next().is_some_and(|c| c.is_ascii_digit()) {
        return None;
    }
    let rest = rest.trim_start();
    let rest = match rest.strip_prefix(':') {
        Some(r) => &r[r.find('=')?..],
        None => rest,
    };
    (rest.starts_with('=') && !rest.starts_with("==")).then(|| name.to_owned())
}

/// Whether a line stores `name` (any value when `None`) into something
/// that outlives the statement.
fn stores(l: &str, name: Option<&str>) -> bool {
    let t = l.trim();
    if t.starts_with('#') {
        return false;
    }
    let mentions = |s: &str| match name {
        None => true,
        Some(n) => s
            .match_indices(n)
            .any(|(i, _)| word_boundary(s, i, n.len())),
    };
    // `y.register_hook(lambda g: g * y.norm())`: a hook on the tensor that
    // refers to it, kept by PyTorch where the collector cannot follow.
    if let Some((receiver, args)) = tensor_hook_call(t) {
        return match name {
            None => true,
            Some(n) => {
                receiver.ends_with(n)
                    && word_boundary(receiver, receiver.len() - n.len(), n.len())
                    && mentions(args)
            }
        };
    }
    for call in [
        ".append(",
        ".extend(",
        ".add(",
        ".insert(",
        ".put(",
        ".appendleft(",
    ] {
        if let Some(i) = t.find(call) {
            return mentions(&t[i + call.len()..]);
        }
    }
    // `self.x = h`, `self.cache[k] = h`, `d[k] = h`, `xs += [h]`
    if let Some(eq) = t.find('=') {
        let (lhs, rhs) = (t[..eq].trim_end(), &t[eq + 1..]);
        if rhs.starts_with('=') || lhs.ends_with(['!', '<', '>', '=']) {
            return false;
        }
        let lhs = lhs.trim_end_matches('+').trim_end();
        let container = lhs.starts_with("self.") || lhs.ends_with(']') || t[..eq].ends_with('+');
        return container && name.is_some() && mentions(rhs);
    }
    false
}

/// A tensor's hook registration in `t` (`y.register_hook(...)`,
/// `register_post_accumulate_grad_hook`): what it is called on, and its
/// arguments.
pub(crate) fn tensor_hook_call(t: &str) -> Option<(&str, &str)> {
    ["register_hook(", "register_post_accumulate_grad_hook("]
        .iter()
        .find_map(|c| {
            let at = t.find(c)?;
            let receiver = t[..at].strip_suffix('.')?;
            Some((receiver.trim_start(), &t[at + c.len()..]))
        })
}

fn word_boundary(s: &str, i: usize, len: usize) -> bool {
    let ok = |c: Option<char>| c.is_none_or(|c| !(c.is_alphanumeric() || c == '_'));
    ok(s[..i].chars().next_back()) && ok(s[i + len..].chars().next())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_the_line_that_keeps_a_tensor() {
        let dir = std::env::temp_dir().join(format!("vramscope-src-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("tmp");
        let code = "class M:\n    def forward(self, x):\n        h = self.fc(x)\n        hh = h * 2\n        self.features.append(h)\n        return hh\n\n    def other(self):\n        self.keep = h\n";
        std::fs::write(dir.join("model.py"), code).expect("write");
        let mut s = Sources::new(vec![dir.clone()]);
        assert_eq!(s.line("model.py", 3).as_deref(), Some("h = self.fc(x)"));
        assert_eq!(
            s.keeper("model.py", 3),
            Some((5, "self.features.append(h)".to_owned()))
        );
        // `hh` is returned, not stored: no keeper, and `other` is another function.
        assert_eq!(s.keeper("model.py", 4), None);
        assert_eq!(s.line("missing.py", 1), None);
        std::fs::remove_dir_all(&dir).ok();
    }

    #[test]
    fn finds_the_line_that_stores_into_a_holder() {
        let dir = std::env::temp_dir().join(format!("vramscope-into-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("tmp");
        let code = "losses = []\ntotal = 0\nlast = None\n\"\"\"Docs: `losses.append(x)`\n  total += loss\n\"\"\"\nfor x in xs:\n    if losses == []:\n        pass\n    all_losses = 1\n    losses.append(loss)\n    total = total + loss.sum()\n    last = err\nclass M:\n    def f(self, h):\n        self.cache[k] = h\nper_class = defaultdict(list)\nfor c in cs:\n    per_class[c].append(out[y == c])\n    grid[i][j] += x\n    if grid[i] == x:\n        pass\n";
        std::fs::write(dir.join("train.py"), code).expect("write");
        let mut s = Sources::new(vec![dir.clone()]);
        let got = |s: &mut Sources, t: &str, a: bool| s.store_into("train.py", t, a).map(|x| x.0);
        assert_eq!(got(&mut s, "losses", false), Some(11));
        assert_eq!(got(&mut s, "total", false), Some(12));
        assert_eq!(got(&mut s, "last", false), Some(13));
        assert_eq!(got(&mut s, "cache", true), Some(16));
        // Into what an index reaches: a call, or an accumulation, not a test.
        assert_eq!(got(&mut s, "per_class", false), Some(19));
        assert_eq!(got(&mut s, "grid", false), Some(20));
        // `cache` as a bare variable is not stored anywhere.
        assert_eq!(got(&mut s, "cache", false), None);
        // A local: only within its function (line 16 runs in `f`, which
        // assigns no `losses`; line 11 runs at module level, not in one).
        assert_eq!(s.store_into_function("train.py", 16, "f", "losses"), None);
        assert_eq!(s.store_into_function("train.py", 11, "", "losses"), None);
        std::fs::remove_dir_all(&dir).ok();
    }

    #[test]
    fn a_hook_on_the_tensor_that_refers_to_it_keeps_it() {
        assert!(stores("y.register_hook(lambda g: g * y.norm())", Some("y")));
        assert!(stores(
            "out.register_hook(functools.partial(f, out))",
            Some("out")
        ));
        // On another tensor, or not referring to it: the hook keeps nothing of `y`.
        assert!(!stores("x.register_hook(lambda g: g * y)", Some("y")));
        assert!(!stores("y.register_hook(lambda g: g * 2)", Some("y")));
        assert!(!stores("my.register_hook(lambda g: g + y)", Some("y")));
        // A module's hook is not a tensor's.
        assert!(!stores("m.register_forward_hook(lambda *a: y)", Some("y")));
    }

    #[test]
    fn store_patterns() {
        assert!(stores("self.cache[k] = out", Some("out")));
        assert!(stores("total_loss += [loss]", Some("loss")));
        assert!(stores("self.last = out", Some("out")));
        assert!(!stores("if out == 3:", Some("out")));
        assert!(!stores("y = out + 1", Some("out")));
        assert!(!stores("outputs.append(other)", Some("out")));
        assert_eq!(assigned_name("    h: Tensor = f(x)").as_deref(), Some("h"));
        assert_eq!(assigned_name("    a.b = f(x)"), None);
        assert_eq!(assigned_name("    h == 3"), None);
    }
}
