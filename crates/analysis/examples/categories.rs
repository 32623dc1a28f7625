//! Print what each block is, at the peak and at the end, for snapshot files:
//! `cargo run --release -p vramscope-analysis --example categories -- FILE…`
use vramscope_analysis::categories::categorize;
use vramscope_analysis::lifetimes::Lifetimes;
use vramscope_analysis::Liveness;

fn main() {
    for path in std::env::args().skip(1) {
        let snap = match vramscope_snapshot::load(path.as_ref(), &Default::default()) {
            Ok(s) => s,
            Err(e) => {
                eprintln!("{path}: {e}");
                continue;
            }
        };
        for d in snap.devices() {
            let t0 = std::time::Instant::now();
            let l = Lifetimes::new(&snap, d);
            let c = categorize(&snap, d, &l);
            let took = t0.elapsed();
            let r = Liveness::new(&snap, d);
            let empty = Default::default();
            let t = snap.trace(d).unwrap_or(&empty);
            let pts = [r.peak_index, t.len().checked_sub(1)];
            let lives = r.live_at_points(t, &pts);
            let mut pc = std::collections::BTreeMap::new();
            for p in &c.phases.phase {
                *pc.entry(format!("{p:?}")).or_insert(0) += 1;
            }
            println!(
                "{path} device {d} ({} blocks, {took:?}) phases {pc:?}",
                l.len()
            );
            for (name, live) in ["peak", "end"].iter().zip(&lives) {
                let tot: Vec<String> = c
                    .totals(&l, live)
                    .iter()
                    .map(|x| format!("{} {} ({:?})", x.category.as_str(), x.bytes, x.source))
                    .collect();
                println!("  {name}: {}", tot.join(", "));
                if std::env::var_os("RULES").is_some() {
                    let mut m = std::collections::BTreeMap::new();
                    for b in live {
                        let k = c.block_of(&l, b);
                        let key = k.map_or("none".to_string(), |k| {
                            format!(
                                "{:?}/{:?}/born-{:?}",
                                c.category[k],
                                c.rule[k],
                                (l.birth[k] != u32::MAX)
                                    .then(|| c.phases.phase[l.birth[k] as usize])
                            )
                        });
                        *m.entry(key).or_insert(0u64) += b.size;
                    }
                    for (k, v) in m {
                        println!("      {k}: {v}");
                    }
                }
            }
        }
    }
}
