//! Short lists of dicts with the same items share their storage (a
//! snapshot's repeated frames lists), and stay distinct, independent lists.

use vramscope_pickle::{ContainerKind, Document, DocumentBuilder, Value};

fn ids(doc: &Document, list: Value) -> Vec<Value> {
    doc.items(list.container().unwrap()).collect()
}

fn frames(b: &mut DocumentBuilder, n: usize) -> Vec<Value> {
    (0..n)
        .map(|i| {
            let k = b.str("line").unwrap();
            let v = b.int(i as i64);
            b.container_with(ContainerKind::Dict, &[k, v]).unwrap()
        })
        .collect()
}

#[test]
fn equal_lists_of_dicts_share_storage_but_not_identity() {
    let mut b = DocumentBuilder::new();
    let f = frames(&mut b, 30);
    let one = b.container_with(ContainerKind::List, &f).unwrap();
    let before = b.doc().heap_bytes();
    let copies: Vec<Value> = (0..1000)
        .map(|_| b.container_with(ContainerKind::List, &f).unwrap())
        .collect();
    let grown = b.doc().heap_bytes() - before;
    // A thousand 30-item copies would take 120 kB of references; shared,
    // they cost their container records only.
    assert!(grown < 1000 * 30 * 4 / 2, "{grown} bytes for 1000 copies");
    assert_ne!(one, copies[0]);
    let root = b.container_with(ContainerKind::List, &copies).unwrap();
    let doc = b.finish(root);
    for c in &copies {
        assert_eq!(ids(&doc, *c), f);
    }
}

#[test]
fn appending_to_a_shared_list_leaves_the_other_unchanged() {
    let mut b = DocumentBuilder::new();
    let f = frames(&mut b, 5);
    let extra = frames(&mut b, 3);
    let a = b.container_with(ContainerKind::List, &f).unwrap();
    let c = b.container_with(ContainerKind::List, &f).unwrap();
    // The shared run ends the pool: `c` grows in place, `a` must not see it.
    b.extend(c.container().unwrap(), &extra[..2]).unwrap();
    // `a` no longer ends the pool: it gets a second run.
    b.extend(a.container().unwrap(), &extra[2..]).unwrap();
    // And a list of something else than dicts after that.
    let n = b.int(7);
    b.extend(c.container().unwrap(), &[n]).unwrap();
    let root = b.container_with(ContainerKind::List, &[a, c]).unwrap();
    let doc = b.finish(root);
    let mut want_a = f.clone();
    want_a.push(extra[2]);
    let mut want_c = f.clone();
    want_c.extend_from_slice(&extra[..2]);
    want_c.push(n);
    assert_eq!(ids(&doc, a), want_a);
    assert_eq!(ids(&doc, c), want_c);
    assert_eq!(doc.len(a.container().unwrap()), 6);
    assert_eq!(doc.len(c.container().unwrap()), 8);
}

#[test]
fn dicts_filled_in_two_batches_keep_every_pair() {
    let mut b = DocumentBuilder::new();
    let d = b.container(ContainerKind::Dict).unwrap();
    let keys: Vec<Value> = ["a", "b", "c", "d"]
        .iter()
        .map(|k| b.str(k).unwrap())
        .collect();
    let one = b.int(1);
    let two = b.int(2);
    b.extend(d.container().unwrap(), &[keys[0], one, keys[1], two])
        .unwrap();
    // Something else lands in the pool between the two batches.
    let _other = b
        .container_with(ContainerKind::Tuple, &[one, two, one])
        .unwrap();
    b.extend(d.container().unwrap(), &[keys[2], two, keys[3], one])
        .unwrap();
    let doc = b.finish(d);
    let got: Vec<(Option<&str>, Option<i64>)> = doc
        .pairs(d.container().unwrap())
        .map(|(k, v)| (doc.as_str(k), doc.as_int(v)))
        .collect();
    assert_eq!(
        got,
        [
            (Some("a"), Some(1)),
            (Some("b"), Some(2)),
            (Some("c"), Some(2)),
            (Some("d"), Some(1))
        ]
    );
}

#[test]
fn lists_filled_in_turns_keep_every_item_in_order() {
    // Two lists appended to alternately: each batch after the first is a
    // new run of the pool, linked after the list's last chunk (kept by the
    // builder, not by the container), and one that ends the pool grows it.
    let mut b = DocumentBuilder::new();
    let x = b.container(ContainerKind::List).unwrap();
    let y = b.container(ContainerKind::List).unwrap();
    let (mut want_x, mut want_y) = (Vec::new(), Vec::new());
    for round in 0..50i64 {
        let vx: Vec<Value> = (0..3).map(|i| b.int(round * 10 + i)).collect();
        b.extend(x.container().unwrap(), &vx).unwrap();
        want_x.extend_from_slice(&vx);
        let vy = b.int(-round);
        b.extend(y.container().unwrap(), &[vy]).unwrap();
        want_y.push(vy);
        if round % 7 == 0 {
            // Twice in a row: the second batch extends the chunk in place.
            let again = b.int(1000 + round);
            b.extend(y.container().unwrap(), &[again]).unwrap();
            want_y.push(again);
        }
    }
    let root = b.container_with(ContainerKind::Tuple, &[x, y]).unwrap();
    let doc = b.finish(root);
    assert_eq!(ids(&doc, x), want_x);
    assert_eq!(ids(&doc, y), want_y);
    assert_eq!(doc.len(y.container().unwrap()), want_y.len());
}
