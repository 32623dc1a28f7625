//! The reader's shortcuts for the opcodes a snapshot repeats a million
//! times (LONG1 of 5-8 bytes, short strings written afresh) give the same
//! values as the general path, wherever the opcode sits in the input: a
//! shortcut reads past the opcode's own bytes, so the last bytes of the
//! input take the general path.

use vramscope_pickle::{parse, Document, Val, Value};

/// A protocol 4 list of `items` (encoded opcodes): the last one is followed
/// by nothing but APPENDS and STOP.
fn list_of(items: &[Vec<u8>]) -> Vec<u8> {
    let mut p = b"\x80\x04](".to_vec();
    for i in items {
        p.extend_from_slice(i);
    }
    p.extend_from_slice(b"e.");
    p
}

fn values(doc: &Document) -> Vec<Value> {
    let root = doc.root().container().expect("a list");
    doc.items(root).collect()
}

/// LONG1 with the little-endian two's complement bytes of `x`, cut to `n`.
fn long1(x: i64, n: usize) -> Vec<u8> {
    let mut op = vec![0x8a, n as u8];
    op.extend_from_slice(&x.to_le_bytes()[..n]);
    op
}

#[test]
fn long1_of_every_short_length_reads_the_same_mid_input_and_at_the_end() {
    let mut cases = Vec::new();
    for n in 1..=8usize {
        let bits = 8 * n as u32;
        let max = if n == 8 {
            i64::MAX
        } else {
            (1i64 << (bits - 1)) - 1
        };
        let min = if n == 8 {
            i64::MIN
        } else {
            -(1i64 << (bits - 1))
        };
        for x in [max, min, -1, 0x1234_5678_9abc_def0i64 >> (64 - bits), 1] {
            cases.push((x, n));
        }
    }
    // The same opcodes followed by plenty of bytes, then with the one under
    // test last, right before APPENDS and STOP.
    let ops: Vec<Vec<u8>> = cases.iter().map(|&(x, n)| long1(x, n)).collect();
    let doc = parse(&list_of(&ops)).expect("parses");
    let got: Vec<i64> = values(&doc)
        .into_iter()
        .map(|v| doc.as_int(v).expect("an int"))
        .collect();
    let want: Vec<i64> = cases.iter().map(|&(x, _)| x).collect();
    assert_eq!(got, want);
    for (&(x, n), op) in cases.iter().zip(&ops) {
        let doc = parse(&list_of(std::slice::from_ref(op))).expect("parses");
        assert_eq!(
            doc.as_int(values(&doc)[0]),
            Some(x),
            "{n} bytes, at the end"
        );
    }
}

/// SHORT_BINUNICODE of `s`.
fn short_str(s: &[u8]) -> Vec<u8> {
    let mut op = vec![0x8c, s.len() as u8];
    op.extend_from_slice(s);
    op
}

#[test]
fn short_strings_written_again_are_one_string_and_bad_bytes_still_replaced() {
    let words: [&[u8]; 6] = [
        b"N/A",
        b"",
        b"fifteen bytes!!",
        b"sixteen bytes!!!",
        b"N/A\xff",
        "é".as_bytes(),
    ];
    let mut ops = Vec::new();
    for _ in 0..3 {
        for w in words {
            ops.push(short_str(w));
        }
    }
    // Last in the input, where the 16-byte window does not fit.
    ops.push(short_str(b"N/A"));
    let doc = parse(&list_of(&ops)).expect("parses");
    let vals = values(&doc);
    let text: Vec<String> = vals
        .iter()
        .map(|&v| match doc.get(v) {
            Val::Str(s) => s.to_string(),
            other => panic!("a string, found {}", other.type_name()),
        })
        .collect();
    let want = [
        "N/A",
        "",
        "fifteen bytes!!",
        "sixteen bytes!!!",
        "N/A\u{fffd}",
        "é",
    ];
    for (i, t) in text.iter().enumerate() {
        assert_eq!(t, want[i % want.len()], "item {i}");
    }
    // Each short word is stored once, however often it is written; the
    // 16-byte one is past the short table and stored each time.
    for (i, &v) in vals.iter().enumerate().skip(want.len()) {
        let first = vals[i % want.len()];
        if want[i % want.len()].len() <= 15 && i < 3 * want.len() {
            assert_eq!(v.str_id(), first.str_id(), "item {i}");
        }
    }
    assert_eq!(vals[3 * want.len()].str_id(), vals[0].str_id());
}
