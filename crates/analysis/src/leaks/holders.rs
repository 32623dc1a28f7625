//! What keeps a leaking site's tensors alive, by name: the recorder's
//! holders (a global list, an attribute of a module, a local of a running
//! function, the autograd graph of a kept tensor) joined to the blocks still
//! alive at the end by address, and the line of the program that stores
//! into that holder.

use serde::Serialize;
use vramscope_snapshot::hash::{FxHashMap as HashMap, FxHashSet as HashSet};
use vramscope_snapshot::{DeviceTrace, Holder, Snapshot};

use super::source::Sources;
use crate::lifetimes::{Lifetimes, BEFORE_WINDOW, STILL_ALIVE};
use vramscope_text::units::bytes;

/// The end of a holder's path to what an autograd graph keeps: the
/// recorder's, for the leaves a kept graph holds (`disc_costs[*] (autograd
/// graph)`), and the analysis', for a graph that grew.
pub const GRAPH_SUFFIX: &str = " (autograd graph)";

/// A holder of some of one site's tensors.
#[derive(Clone, Debug, Serialize)]
pub struct HeldBy {
    /// `global`, `local` or `exception`.
    pub kind: String,
    /// The variable (`losses`).
    pub name: String,
    /// The path from it to the tensors (`losses[*]`, `model.cache[*]`,
    /// `total (autograd graph)`).
    pub path: String,
    /// The type of the variable's value (`list`).
    pub type_name: String,
    /// The module file of a global, the file of a local's function.
    pub file: String,
    /// Of a local: the function.
    pub function: String,
    /// Whether the tensors are kept by the autograd graph of the held
    /// tensor rather than held themselves (`path` ends in
    /// [`GRAPH_SUFFIX`]): the leaves it accumulates into, counted, or a
    /// graph that grew between looks, whose saved tensors are not read
    /// (`tensors` and `bytes` are then 0).
    pub through_graph: bool,
    /// Of this site's tensors, those the holder held when the recorder
    /// looked (at the end, or while the program ran): how many, and their
    /// bytes.
    pub tensors: u64,
    pub bytes: u64,
    /// The line that stores into the holder, when the source is readable:
    /// (file, line, code).
    pub stored_at: Option<(String, u32, String)>,
    /// The sentence: "held by `losses` (list, global of train.py): 5 tensors
    /// (20 B); train.py:34 stores them: `losses.append(loss)`".
    pub text: String,
}

/// Holders by the address of each tensor they hold.
pub(super) struct HolderIndex<'a> {
    holders: &'a [Holder],
    /// Address -> holders that held a tensor there (at their `time_us`).
    by_addr: HashMap<u64, Vec<u32>>,
    /// Per holder: the first holder with the same variable and path (one
    /// holder seen at several moments is one holder).
    keys: Vec<u32>,
    /// Per holder: the first holder with the same variable (whatever the
    /// path: a kept exception holds its frames' several tensors).
    var_keys: Vec<u32>,
    /// When each iteration began (µs), in order.
    iteration_starts: Vec<i64>,
    /// Variables (`var_keys`) that held more tensors at a later look than
    /// at an earlier one: what accumulates, whatever iterations its tensors
    /// were born in (a loader that prefetches makes the next batches during
    /// the current iteration, so birth times alone can put several kept
    /// batches in one iteration).
    growing: HashSet<u32>,
}

impl<'a> HolderIndex<'a> {
    /// `iteration_starts`: when each iteration began (µs), in order.
    pub fn new(snap: &'a Snapshot, iteration_starts: Vec<i64>) -> HolderIndex<'a> {
        let holders = snap
            .source
            .recorder
            .as_ref()
            .map_or(&[][..], |r| r.holders.as_slice());
        let mut by_addr: HashMap<u64, Vec<u32>> = HashMap::default();
        for (i, h) in holders.iter().enumerate() {
            for &a in &h.addrs {
                by_addr.entry(a).or_default().push(i as u32);
            }
        }
        let mut first: HashMap<(&str, &str, &str, &str, &str), u32> = HashMap::default();
        let keys = holders
            .iter()
            .enumerate()
            .map(|(i, h)| {
                *first
                    .entry((&h.kind, &h.name, &h.file, &h.function, &h.path))
                    .or_insert(i as u32)
            })
            .collect();
        let mut first_var: HashMap<(&str, &str, &str, &str), u32> = HashMap::default();
        let var_keys: Vec<u32> = holders
            .iter()
            .enumerate()
            .map(|(i, h)| {
                *first_var
                    .entry((&h.kind, &h.name, &h.file, &h.function))
                    .or_insert(i as u32)
            })
            .collect();
        let growing = growing_vars(holders, &var_keys);
        HolderIndex {
            holders,
            by_addr,
            keys,
            var_keys,
            iteration_starts,
            growing,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.holders.is_empty()
    }

    /// The holder of block `b`: of those that held a tensor at its address,
    /// the latest that looked while the block was alive (an address is
    /// reused once its block is freed) and after the block's iteration had
    /// ended. A tensor of the iteration under way is held by its loop
    /// variable (`fake = G(z)`) whether or not something also keeps it; the
    /// older ones are held only by what keeps them (`G.cache[*]`).
    fn of_block(&self, l: &Lifetimes, t: &DeviceTrace, b: usize) -> Option<u32> {
        let hs = self.by_addr.get(&l.addr[b])?;
        let time = |e: u32| t.time_us.get(e as usize).copied();
        let born = if l.birth[b] == BEFORE_WINDOW {
            i64::MIN
        } else {
            time(l.birth[b]).unwrap_or(i64::MIN)
        };
        let died = if l.death[b] == STILL_ALIVE {
            i64::MAX
        } else {
            time(l.death[b]).unwrap_or(i64::MIN)
        };
        hs.iter()
            .copied()
            .filter(|&h| {
                let at = self.holders[h as usize].time_us;
                // The end's holders (no time) hold what is still alive.
                let alive = if at == i64::MAX {
                    l.death[b] == STILL_ALIVE
                } else {
                    born <= at && at < died
                };
                alive && born < self.iteration_start(at)
            })
            .max_by_key(|&h| (self.holders[h as usize].time_us, std::cmp::Reverse(h)))
    }

    /// Per site (`of_block`: the site of each block), the holder of most of
    /// its bytes: sites that grow together but are kept by different
    /// holders are different leaks.
    pub fn of_sites(&self, l: &Lifetimes, t: &DeviceTrace, of_block: &[u32]) -> HashMap<u32, u32> {
        if self.is_empty() {
            return HashMap::default();
        }
        let mut tally: HashMap<u32, HashMap<u32, Tally>> = HashMap::default();
        for (b, &site) in of_block.iter().enumerate().take(l.len()) {
            if let Some(h) = self.of_block(l, t, b) {
                tally
                    .entry(site)
                    .or_default()
                    .entry(self.var_keys[h as usize])
                    .or_default()
                    .add(h, self.iteration_of(l, t, b), l.size[b]);
            }
        }
        tally
            .into_iter()
            .filter_map(|(site, per)| Some((site, self.best(&per)?.0)))
            .collect()
    }

    /// The iteration a block was born in (its index; 0 before the first).
    fn iteration_of(&self, l: &Lifetimes, t: &DeviceTrace, b: usize) -> usize {
        let born = t
            .time_us
            .get(l.birth[b] as usize)
            .copied()
            .unwrap_or(i64::MIN);
        self.iteration_starts.partition_point(|&s| s <= born)
    }

    /// The start of the iteration under way at `at` (`i64::MAX` without
    /// iterations: every block counts).
    fn iteration_start(&self, at: i64) -> i64 {
        let k = self.iteration_starts.partition_point(|&s| s <= at);
        if k == 0 {
            i64::MAX
        } else {
            self.iteration_starts[k - 1]
        }
    }

    fn key(&self, h: u32) -> u32 {
        self.keys[h as usize]
    }

    /// The variable whose autograd graph grew between the recorder's looks
    /// (the largest such graph at the last look): what keeps a graph per
    /// iteration alive (`total = total + loss`), whose saved tensors cannot
    /// be read without running the graph's hooks.
    pub fn growing_graph(&self, stack_files: &[String], src: &mut Sources) -> Option<HeldBy> {
        let mut seen: HashMap<u32, (i64, u64, i64, u64)> = HashMap::default();
        for (i, h) in self.holders.iter().enumerate() {
            if h.graph_nodes == 0 || h.time_us == i64::MAX {
                continue;
            }
            let e = seen.entry(self.var_keys[i]).or_insert((
                h.time_us,
                h.graph_nodes,
                h.time_us,
                h.graph_nodes,
            ));
            if h.time_us < e.0 {
                (e.0, e.1) = (h.time_us, h.graph_nodes);
            }
            if h.time_us >= e.2 {
                (e.2, e.3) = (h.time_us, h.graph_nodes);
            }
        }
        let (&k, &(_, first, _, last)) = seen
            .iter()
            .filter(|(_, &(t0, n0, t1, n1))| t1 > t0 && n1 > n0)
            .max_by_key(|(&k, &(_, _, _, n1))| (n1, std::cmp::Reverse(k)))?;
        let h = &self.holders[k as usize];
        let what = format!(
            "the autograd graph of `{}` ({}, {}){} grew from {first} to {last} nodes between the recorder's looks: it keeps the tensors each iteration saved for a backward pass that never runs",
            h.name,
            h.type_name,
            owner(&h.kind, &h.file, &h.function, h.line),
            via(h),
        );
        let mut held = HeldBy::new(h, true, (0, 0), what, stack_files, src);
        held.path.push_str(GRAPH_SUFFIX);
        Some(held)
    }

    /// The holder of most of the bytes of `blocks` (the site's blocks), if
    /// the recorder named one.
    pub fn held_by(
        &self,
        l: &Lifetimes,
        t: &DeviceTrace,
        blocks: impl Iterator<Item = usize>,
        stack_files: &[String],
        src: &mut Sources,
    ) -> Option<HeldBy> {
        if self.is_empty() {
            return None;
        }
        let mut per: HashMap<u32, Tally> = HashMap::default();
        for b in blocks {
            if let Some(h) = self.of_block(l, t, b) {
                per.entry(self.key(h))
                    .or_default()
                    .add(h, self.iteration_of(l, t, b), l.size[b]);
            }
        }
        let (h, tally) = self.best(&per)?;
        Some(self.held(h, (tally.tensors, tally.bytes), stack_files, src))
    }

    /// [`Self::held_by`] for a site with one tensor alive at a time that is
    /// larger at every look (`preds = torch.cat([preds, p])`): there the
    /// variable holding the one latest tensor is what keeps the growth, not
    /// a loop variable to look past. The latest look's holder of the site's
    /// largest tensor then.
    pub fn held_by_latest(
        &self,
        l: &Lifetimes,
        t: &DeviceTrace,
        blocks: impl Iterator<Item = usize>,
        stack_files: &[String],
        src: &mut Sources,
    ) -> Option<HeldBy> {
        let (_, size, h) = blocks
            .filter_map(|b| {
                let h = self.of_block(l, t, b)?;
                Some((self.holders[h as usize].time_us, l.size[b], h))
            })
            .reduce(|a, x| if (x.0, x.1) > (a.0, a.1) { x } else { a })?;
        Some(self.held(h, (1, size), stack_files, src))
    }

    /// The sentence of holder `h` keeping `tensors` tensors of `bytes`.
    fn held(
        &self,
        h: u32,
        (tensors, bytes_held): (u64, u64),
        stack_files: &[String],
        src: &mut Sources,
    ) -> HeldBy {
        let h = &self.holders[h as usize];
        let plural = if tensors == 1 { "" } else { "s" };
        // Leaves a kept graph accumulates into (the recorder's path ends in
        // GRAPH_SUFFIX): no Python object holds them but the graph's
        // `AccumulateGrad` nodes.
        let through_graph = h.path.ends_with(GRAPH_SUFFIX);
        let what = if through_graph {
            format!(
                "held by the autograd graph of `{}` (`{}`: {}, {}), which keeps the tensors it would accumulate gradients into (made with `requires_grad`, not parameters) and their `.grad`: {tensors} tensor{plural} ({})",
                h.path.trim_end_matches(GRAPH_SUFFIX),
                h.name,
                h.type_name,
                owner(&h.kind, &h.file, &h.function, h.line),
                bytes(bytes_held)
            )
        } else {
            format!(
                "held by `{}` ({}, {}){}: {tensors} tensor{plural} ({})",
                h.name,
                h.type_name,
                owner(&h.kind, &h.file, &h.function, h.line),
                via(h),
                bytes(bytes_held)
            )
        };
        HeldBy::new(
            h,
            through_graph,
            (tensors, bytes_held),
            what,
            stack_files,
            src,
        )
    }
}

impl HeldBy {
    /// `what` holds them; the line that stores into the holder is looked
    /// up and appended to the sentence.
    fn new(
        h: &Holder,
        through_graph: bool,
        (tensors, bytes): (u64, u64),
        what: String,
        stack_files: &[String],
        src: &mut Sources,
    ) -> HeldBy {
        let stored_at = stored_at(h, stack_files, src);
        let text = match &stored_at {
            Some((file, line, code)) => {
                format!("{what}; {}:{line} stores into it: `{code}`", base(file))
            }
            None => what,
        };
        HeldBy {
            kind: h.kind.clone(),
            name: h.name.clone(),
            path: h.path.clone(),
            type_name: h.type_name.clone(),
            file: h.file.clone(),
            function: h.function.clone(),
            through_graph,
            tensors,
            bytes,
            stored_at,
            text,
        }
    }
}

/// `` as `model.cache[*]` `` when the path goes past the variable.
fn via(h: &Holder) -> String {
    if h.path != h.name {
        format!(" as `{}`", h.path)
    } else {
        String::new()
    }
}

/// `global of train.py`, `local of validate (train.py:12)`.
pub fn owner(kind: &str, file: &str, function: &str, line: u32) -> String {
    let f = base(file);
    match kind {
        "global" if file.starts_with('<') => {
            format!("global of module {}", file.trim_matches(['<', '>']))
        }
        "global" => format!("global of {f}"),
        "local" => format!("local of {function} ({f}:{line})"),
        "exception" => "the exception being handled".to_owned(),
        k => k.to_owned(),
    }
}

fn base(f: &str) -> &str {
    f.rsplit(['/', '\\']).next().unwrap_or(f)
}

/// The line that stores into the holder: for a variable, in its module (a
/// global) or function's file (a local); for an attribute on the way
/// (`model.cache[*]`), in the files of the site's stack, where the class
/// that sets it usually is.
fn stored_at(
    h: &Holder,
    stack_files: &[String],
    src: &mut Sources,
) -> Option<(String, u32, String)> {
    let path = h.path.trim_end_matches(GRAPH_SUFFIX);
    // The last attribute before an index (`model.cache[*]` -> `cache`),
    // when the path goes through one; else the variable itself.
    let attr = path
        .split("[*]")
        .next()
        .and_then(|p| p.rsplit_once('.'))
        .map(|(_, a)| a)
        .filter(|a| !a.is_empty() && !a.starts_with('<') && *a != "grad");
    if let Some(a) = attr {
        for f in stack_files.iter().chain(std::iter::once(&h.file)) {
            if let Some((line, code)) = src.store_into(f, a, true) {
                return Some((f.clone(), line, code));
            }
        }
    }
    if h.kind == "exception" || h.file.is_empty() {
        return None;
    }
    let found = if h.kind == "local" {
        src.store_into_function(&h.file, h.line, &h.function, &h.name)
    } else {
        src.store_into(&h.file, &h.name, false)
    };
    found.map(|(line, code)| (h.file.clone(), line, code))
}

/// What one holder holds of one site: tensors, bytes, and the iterations
/// they were born in.
#[derive(Default)]
struct Tally {
    tensors: u64,
    bytes: u64,
    /// Per look (the holder entry of one sample): the iterations of the
    /// tensors it held then.
    by_look: HashMap<u32, std::collections::BTreeSet<usize>>,
}

impl Tally {
    fn add(&mut self, look: u32, iteration: usize, bytes: u64) {
        self.tensors += 1;
        self.bytes += bytes;
        self.by_look.entry(look).or_default().insert(iteration);
    }

    /// The most iterations' tensors it held at one look: a loop variable
    /// holds one iteration's at any moment, whatever it held over time.
    fn iterations(&self) -> usize {
        self.by_look.values().map(|s| s.len()).max().unwrap_or(0)
    }
}

impl HolderIndex<'_> {
    /// The holder that keeps a site's tensors (`per`: keyed by a holder
    /// index): of those holding tensors of two iterations or more at one
    /// look, or whose variable held more tensors at a later look, the one
    /// holding the most iterations (what grows keeps every iteration's; a
    /// loop variable or the graph of the latest result holds one or two),
    /// then the most bytes.
    fn best<'t>(&self, per: &'t HashMap<u32, Tally>) -> Option<(u32, &'t Tally)> {
        // One iteration's tensors are what any loop variable holds (the
        // last loss, the current batch): a keeper holds several iterations',
        // or more and more tensors.
        per.iter()
            .filter(|(&h, t)| {
                t.iterations() >= 2 || self.growing.contains(&self.var_keys[h as usize])
            })
            .max_by(|a, b| {
                (a.1.iterations(), a.1.bytes)
                    .cmp(&(b.1.iterations(), b.1.bytes))
                    .then(b.0.cmp(a.0))
            })
            .map(|(&h, t)| (h, t))
    }
}

/// Variables that held more tensors at a later look than at an earlier one
/// (tensors summed over each variable's paths at each look).
fn growing_vars(holders: &[Holder], var_keys: &[u32]) -> HashSet<u32> {
    let mut at: HashMap<(u32, i64), u64> = HashMap::default();
    for (h, &k) in holders.iter().zip(var_keys) {
        *at.entry((k, h.time_us)).or_default() += h.tensors;
    }
    let mut looks: Vec<((u32, i64), u64)> = at.into_iter().collect();
    looks.sort_unstable();
    looks
        .windows(2)
        .filter(|w| w[0].0 .0 == w[1].0 .0 && w[1].1 > w[0].1)
        .map(|w| w[0].0 .0)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn look(name: &str, path: &str, time_us: i64, tensors: u64) -> Holder {
        Holder {
            time_us,
            kind: "local".into(),
            name: name.into(),
            path: path.into(),
            tensors,
            ..Holder::default()
        }
    }

    #[test]
    fn a_variable_that_holds_more_at_a_later_look_grows() {
        // `errors` keeps exceptions whose frames hold a batch and logits
        // each (two paths, summed per look); `x` is the loop variable.
        let holders = [
            look("x", "x", 100, 1),
            look("errors", "errors[*].<local x>", 100, 1),
            look("errors", "errors[*].<local logits>", 100, 1),
            look("x", "x", 300, 1),
            look("errors", "errors[*].<local x>", 300, 3),
            look("errors", "errors[*].<local logits>", 300, 3),
        ];
        let keys = [0, 1, 1, 0, 1, 1];
        let growing = growing_vars(&holders, &keys);
        assert!(growing.contains(&1));
        assert!(!growing.contains(&0));
    }
}
