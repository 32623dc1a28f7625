//! `cargo run --release -p vramscope-pickle --example parse_file FILE`: parse
//! a pickle and print counts, for quick timing.
fn main() {
    let path = std::env::args().nth(1).expect("usage: parse_file FILE");
    let data = std::fs::read(&path).expect("read");
    let t = std::time::Instant::now();
    match vramscope_pickle::parse(&data) {
        Ok(doc) => println!(
            "ok in {:?}: {} containers, {} skipped, truncated: {:?}, heap {} MB",
            t.elapsed(),
            doc.container_count(),
            doc.skipped_count,
            doc.truncated,
            doc.heap_bytes() >> 20
        ),
        Err(e) => println!("error: {e}"),
    }
}
