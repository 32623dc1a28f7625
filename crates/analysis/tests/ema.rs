//! An EMA's copy of the weights, named by the EMA class's code in its stack
//! (`categories/ema.rs`): real CPU recordings of `python/tests/scripts/
//! ema_runs.py` (an MLP of 5,292,072 bytes of fp32 parameters, AdamW, 4
//! steps; tests/fixtures/recorded/README.md).

use std::collections::HashMap;

use vramscope_analysis::categories::{categorize, Category, Rule, Source};
use vramscope_analysis::lifetimes::Lifetimes;
use vramscope_analysis::Liveness;
use vramscope_snapshot::{load, Snapshot};

const PARAMS: u64 = 5_292_072;

fn recorded(name: &str) -> Snapshot {
    load(&vramscope_testdata::recorded(name), &Default::default()).expect("loads")
}

/// Bytes per category alive at the end, and per rule of the EMA's blocks.
fn at_end(snap: &Snapshot) -> (HashMap<Category, u64>, HashMap<Rule, u64>) {
    let l = Lifetimes::new(snap, 0);
    let c = categorize(snap, 0, &l);
    let t = snap.trace(0).expect("trace");
    let live = Liveness::new(snap, 0).live_after(t, t.len().checked_sub(1));
    let by_category = c
        .totals(&l, &live)
        .into_iter()
        .map(|x| (x.category, x.bytes))
        .collect();
    let mut by_rule = HashMap::new();
    for b in &live {
        if let Some(k) = c
            .block_of(&l, b)
            .filter(|&k| c.category[k] == Category::Ema)
        {
            assert_eq!(c.source[k], Some(Source::Inferred));
            *by_rule.entry(c.rule[k]).or_insert(0) += b.size;
        }
    }
    (by_category, by_rule)
}

/// timm's `ModelEmaV3`, its EMA model run once at the end (to evaluate):
/// the recorder tagged those weights as parameters, as it does every
/// module's that runs a forward. Its stack says whose copy it is.
#[test]
fn timms_ema_model_is_not_the_models_parameters() {
    let (e, rules) = at_end(&recorded("ema_timm.pickle"));
    assert_eq!(e.get(&Category::Ema), Some(&PARAMS), "{e:?}");
    assert_eq!(e.get(&Category::Parameter), Some(&PARAMS), "{e:?}");
    assert_eq!(rules.get(&Rule::EmaFrames), Some(&PARAMS));
}

/// `AveragedModel(model, multi_avg_fn=get_ema_multi_avg_fn(0.999))` built
/// after the first optimizer step: kept past a step, it was taken for
/// optimizer state (8 bytes more: the copy's count of averages).
#[test]
fn an_averaged_model_made_in_the_loop_is_not_optimizer_state() {
    let (e, _) = at_end(&recorded("ema_swa.pickle"));
    assert_eq!(e.get(&Category::Ema), Some(&(PARAMS + 8)), "{e:?}");
    let state = e.get(&Category::OptimizerState).copied().unwrap_or(0);
    assert!((2 * PARAMS..2 * PARAMS + 1024).contains(&state), "{e:?}");
}

/// `copy.deepcopy(model)` updated by `torch._foreach_lerp_`: no library's
/// code, no claim. The copy stays unknown, as memory kept that nothing
/// names.
#[test]
fn an_ema_written_by_hand_is_not_claimed() {
    let (e, _) = at_end(&recorded("ema_by_hand.pickle"));
    assert_eq!(e.get(&Category::Ema), None, "{e:?}");
    let unknown = e.get(&Category::Unknown).copied().unwrap_or(0);
    assert!((PARAMS..PARAMS + 1024).contains(&unknown), "{e:?}");
}
