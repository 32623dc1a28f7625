//! Labels that came with the file, before any inference:
//!
//! * the Memory Profiler's `category` of the block's first version (trace
//!   entries of profiler-built snapshots, or the block itself);
//! * vramscope's recorder tags: `category=…` in the `user_metadata` of the
//!   block's `alloc` (what `_set_memory_metadata` stamps), of an `annotate`
//!   entry at its address (`torch.cuda.memory._annotate_tensor`), or a row
//!   of the snapshot's `vramscope_tags` naming an address live at a time.
//!
//! Tags beat the profiler's labels: the recorder knew which tensors were the
//! parameters, their `.grad` and the optimizer's state; the profiler
//! reconstructs that from data flow.

use vramscope_snapshot::hash::FxHashMap as HashMap;
use vramscope_snapshot::{Action, DeviceTrace, Snapshot, StrId, Tag, NO_TIME};

use super::{Categories, Category, CategoryOptions, Rule, Source};
use crate::lifetimes::{Lifetimes, BEFORE_WINDOW, NO_BLOCK};

/// Apply the file's labels to `c`; returns which blocks have one.
pub(super) fn given_labels(
    snap: &Snapshot,
    device: u32,
    t: &DeviceTrace,
    l: &Lifetimes,
    c: &mut Categories,
    opts: &CategoryOptions,
) -> Vec<bool> {
    let mut given = vec![false; l.len()];
    if opts.use_profiler_labels {
        for b in 0..l.len() {
            if let Some(cat) = l.category[b].and_then(|s| Category::parse(snap.str(s))) {
                label(c, &mut given, b, cat, Source::Profiler);
            }
        }
    }
    if !opts.use_recorder_tags {
        return given;
    }
    let tags: Vec<&Tag> = snap.tags.iter().filter(|g| g.device == device).collect();
    // The category each event's metadata names, read once per distinct
    // string (a million events share a handful), and nothing to walk
    // when none names one and no tag was taken.
    let mut by_string: HashMap<StrId, Option<Category>> = HashMap::default();
    let meta_category: Vec<Option<Category>> = t
        .user_metadata
        .as_ref()
        .map(|m| {
            m.iter()
                .map(|&s| {
                    *by_string
                        .entry(s)
                        .or_insert_with(|| tagged_category(snap.str(s)))
                })
                .collect()
        })
        .unwrap_or_default();
    if tags.is_empty() && meta_category.iter().all(Option::is_none) {
        return given;
    }
    // The block alive at each address as the trace is walked, to resolve
    // `annotate` entries and tags.
    let mut live: HashMap<u64, u32> = HashMap::default();
    for (b, &born) in l.birth.iter().enumerate() {
        if born == BEFORE_WINDOW {
            live.entry(l.addr[b]).or_insert(b as u32);
        }
    }
    let mut next = 0usize;
    let mut apply_tags_before =
        |time: Option<i64>, live: &HashMap<u64, u32>, c: &mut Categories, given: &mut [bool]| {
            while let Some(g) = tags.get(next) {
                if time.is_some_and(|x| g.time_us >= x) {
                    break;
                }
                next += 1;
                let (Some(&b), Some(cat)) =
                    (live.get(&g.addr), Category::parse(snap.str(g.category)))
                else {
                    continue;
                };
                label(c, given, b as usize, cat, Source::Recorder);
            }
        };
    for i in 0..t.len() {
        // Tags taken before this event name what was live then. Traces
        // without times resolve every tag against the end state.
        if t.time_us[i] != NO_TIME {
            apply_tags_before(Some(t.time_us[i]), &live, c, &mut given);
        }
        let block = l.event_block[i];
        let meta = meta_category.get(i).copied().flatten();
        match t.action[i] {
            Action::Alloc => {
                live.insert(t.addr[i], block);
                if let Some(cat) = meta {
                    label(c, &mut given, block as usize, cat, Source::Recorder);
                }
            }
            Action::Annotate => {
                if let (Some(&b), Some(cat)) = (live.get(&t.addr[i]), meta) {
                    label(c, &mut given, b as usize, cat, Source::Recorder);
                }
            }
            // The block freed, unless the address was taken since.
            Action::FreeCompleted if block != NO_BLOCK && live.get(&t.addr[i]) == Some(&block) => {
                live.remove(&t.addr[i]);
            }
            _ => {}
        }
    }
    apply_tags_before(None, &live, c, &mut given);
    given
}

fn label(c: &mut Categories, given: &mut [bool], b: usize, cat: Category, src: Source) {
    if b < given.len() {
        c.category[b] = cat;
        c.source[b] = Some(src);
        c.rule[b] = Rule::Given;
        given[b] = true;
    }
}

/// `category=gradient` in a recorder tag (`;`, `,` or space separated), or
/// `"category":"gradient"` when the metadata was set as a dict.
pub(super) fn tagged_category(meta: &str) -> Option<Category> {
    tagged_category_name(meta).and_then(Category::parse)
}

/// The value of a recorder tag's category, named or not (`output`, which
/// is no category, for what a call returned: `evaluation_graphs`).
pub(super) fn tagged_category_name(meta: &str) -> Option<&str> {
    if let Some(v) = meta
        .split([';', ' ', ','])
        .find_map(|kv| kv.strip_prefix("category="))
    {
        return Some(v);
    }
    let rest = meta.split("\"category\":").nth(1)?;
    rest.trim_start().trim_start_matches('"').split('"').next()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tag_forms() {
        assert_eq!(
            tagged_category("category=optimizer_state"),
            Some(Category::OptimizerState)
        );
        assert_eq!(
            tagged_category("phase=backward;category=gradient"),
            Some(Category::Gradient)
        );
        assert_eq!(
            tagged_category("{\"phase\":\"forward\",\"category\":\"input\"}"),
            Some(Category::Input)
        );
        assert_eq!(tagged_category("category=weights"), None);
        assert_eq!(tagged_category("step 3"), None);
    }
}
