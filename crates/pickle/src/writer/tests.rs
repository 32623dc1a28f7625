use super::*;

fn dump(proto: u8, body: impl Fn(&mut PickleWriter<Vec<u8>>)) -> Vec<u8> {
    let mut w = PickleWriter::new(Vec::new(), proto).unwrap();
    body(&mut w);
    w.finish().unwrap()
}

fn hex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

/// ```python
/// shared = [1, 2]
/// obj = {
///   "ints": [0, 255, 256, 65535, 65536, -1, -256, 2**31-1, -2**31, 2**31,
///            -2**31-1, 2**47+512, 2**63-1, -2**63],
///   "misc": [None, True, False, 1.5, -0.25, "h\u00e9llo", "", (), (7,), (1, 2),
///            (1, 2, 3), (1, 2, 3, 4)],
///   "one": [shared], "shared": shared, "d1": {"x": 1},
///   "bytes": [b"ab", b"", b"cd"],
/// }
/// for p in (2, 3, 4, 5): print(p, pickle.dumps(obj, protocol=p).hex())
/// ```
fn small(w: &mut PickleWriter<Vec<u8>>) {
    w.begin_dict();
    w.str("ints");
    w.begin_list();
    for i in [
        0,
        255,
        256,
        65535,
        65536,
        -1,
        -256,
        i32::MAX as i64,
        i32::MIN as i64,
    ] {
        w.int(i);
    }
    for i in [1 << 31, -(1 << 31) - 1, (1 << 47) + 512, i64::MAX, i64::MIN] {
        w.int(i);
    }
    w.end_list();
    w.str("misc");
    w.begin_list_len(12);
    w.none();
    w.bool(true);
    w.bool(false);
    w.float(1.5);
    w.float(-0.25);
    w.str("h\u{e9}llo");
    w.str("");
    for n in 0..=4u64 {
        if n == 1 {
            w.begin_tuple(1);
            w.int(7);
        } else if n == 0 {
            w.begin_tuple(0);
        } else {
            w.begin_tuple(n);
            (1..=n as i64).for_each(|i| w.int(i));
        }
        w.end_tuple();
    }
    w.end_list();
    w.str("one");
    w.begin_list();
    let shared = w.begin_list();
    w.int(1);
    w.int(2);
    w.end_list();
    w.end_list();
    w.str("shared");
    w.get(shared);
    w.str("d1");
    w.begin_dict();
    w.str("x");
    w.int(1);
    w.end_dict();
    w.str("bytes");
    w.begin_list();
    w.bytes(b"ab");
    w.bytes(b"");
    w.bytes(b"cd");
    w.end_list();
    w.end_dict();
}

#[test]
fn small_structure_matches_cpython() {
    let common = "4b004bff4d00014dffff4a000001004affffffff4a00ffffff4affffff7f4a000000808a0500000080008a05ffffff7fff8a07000200000080008a08ffffffffffffff7f8a080000000000000080";
    let p2 = format!("80027d7100285804000000696e747371015d710228{common}6558040000006d69736371035d7104284e8889473ff800000000000047bfd0000000000000580600000068c3a96c6c6f710558000000007106294b078571074b014b028671084b014b024b03877109284b014b024b034b0474710a6558030000006f6e65710b5d710c5d710d284b014b0265615806000000736861726564710e680d58020000006431710f7d711058010000007871114b01735805000000627974657371125d711328635f636f646563730a656e636f64650a711458020000006162711558060000006c6174696e317116867117527118635f5f6275696c74696e5f5f0a62797465730a71192952711a681458020000006364711b681686711c52711d65752e");
    let p3 = format!("80037d7100285804000000696e747371015d710228{common}6558040000006d69736371035d7104284e8889473ff800000000000047bfd0000000000000580600000068c3a96c6c6f710558000000007106294b078571074b014b028671084b014b024b03877109284b014b024b034b0474710a6558030000006f6e65710b5d710c5d710d284b014b0265615806000000736861726564710e680d58020000006431710f7d711058010000007871114b01735805000000627974657371125d7113284302616271144300711543026364711665752e");
    let p4 = format!("95eb000000000000007d94288c04696e7473945d9428{common}658c046d697363945d94284e8889473ff800000000000047bfd00000000000008c0668c3a96c6c6f948c0094294b0785944b014b0286944b014b024b038794284b014b024b034b047494658c036f6e65945d945d94284b014b0265618c0673686172656494680d8c026431947d948c0178944b01738c056279746573945d94284302616294430094430263649465752e");
    assert_eq!(dump(2, small), hex(&p2));
    assert_eq!(dump(3, small), hex(&p3));
    assert_eq!(dump(4, small), hex(&format!("8004{p4}")));
    assert_eq!(dump(5, small), hex(&format!("8005{p4}")));
}

#[test]
fn ints_beyond_64_bits_match_cpython() {
    // pickle.dumps(v, 2).hex() for each v
    for (v, want) in [
        ((1i128 << 64) - 1, "80028a09ffffffffffffffff002e"),
        (1i128 << 70, "80028a090000000000000000402e"),
        (-(1i128 << 64), "80028a090000000000000000ff2e"),
        (-(1i128 << 63) - 1, "80028a09ffffffffffffff7fff2e"),
        (i128::MAX, "80028a10ffffffffffffffffffffffffffffff7f2e"),
    ] {
        assert_eq!(dump(2, |w| w.int128(v)), hex(want), "{v}");
    }
    assert_eq!(dump(2, |w| w.int128(-1)), dump(2, |w| w.int(-1)));
}

#[test]
fn tiny_pickles_are_unframed() {
    // pickle.dumps(None, 4), pickle.dumps({}, 4), pickle.dumps([1], 4)
    assert_eq!(dump(4, |w| w.none()), b"\x80\x04N.");
    assert_eq!(
        dump(4, |w| {
            w.begin_dict();
            w.end_dict()
        }),
        b"\x80\x04}\x94."
    );
    let one = dump(4, |w| {
        w.begin_list();
        w.int(1);
        w.end_list()
    });
    assert_eq!(
        one,
        b"\x80\x04\x95\x06\x00\x00\x00\x00\x00\x00\x00]\x94K\x01a."
    );
}

#[test]
fn rejects_bad_protocol_and_reports_io_errors() {
    assert!(PickleWriter::new(Vec::new(), 1).is_err());
    struct Full;
    impl Write for Full {
        fn write(&mut self, _: &[u8]) -> io::Result<usize> {
            Err(io::Error::new(io::ErrorKind::StorageFull, "full"))
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }
    assert!(PickleWriter::new(Full, 4).is_err());
    let mut w = PickleWriter::new(io::Cursor::new([0u8; 8]), 4).unwrap();
    w.begin_list();
    (0..100_000).for_each(|i| w.int(i));
    assert!(w.check().is_err());
    w.end_list();
    assert!(w.finish().is_err());
}
