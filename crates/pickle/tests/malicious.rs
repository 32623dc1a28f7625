//! Pickles that would run code under `pickle.load` must decode to inert
//! values: nothing is imported, called or constructed, and
//! `Document::skipped` says what the file asked for.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{SystemTime, UNIX_EPOCH};

use vramscope_pickle::{Document, Opaque, PickleError, Val, Value, MAX_SKIPPED_RECORDS};

/// Writes `<name>.pickle` files into argv[1]; argv[2] is the shell command
/// the malicious objects would run.
const GENERATOR: &str = r#"
import copyreg, os, pickle, subprocess, sys

out, cmd = sys.argv[1], sys.argv[2]

class Evil:
    def __reduce__(self):
        return (os.system, (cmd,))

class EvilWithState:
    def __reduce__(self):
        return (os.system, (cmd,), {"cmd": cmd})

class EvilItems:
    # listitems / dictitems make the pickler emit APPENDS / SETITEMS onto
    # the (never constructed) result.
    def __reduce__(self):
        return (os.system, (cmd,), None, iter([cmd, 1]), iter([("k", cmd)]))

class EvilPopen:
    def __reduce__(self):
        return (subprocess.Popen, (["sh", "-c", cmd],))

class Plain:
    def __init__(self):
        self.cmd = cmd

class WithNewArgsEx:
    def __new__(cls, *args, **kwargs):
        return object.__new__(cls)
    def __getnewargs_ex__(self):
        return ((cmd,), {"shell": True})

def dump(name, obj, protocols):
    for p in protocols:
        with open(os.path.join(out, "%s_p%d.pickle" % (name, p)), "wb") as f:
            f.write(pickle.dumps(obj, protocol=p))

dump("reduce", Evil(), range(6))
dump("nested", {"segments": [Evil(), 1], "device_traces": [[Evil()]]}, range(6))
dump("state", EvilWithState(), range(6))
dump("items", EvilItems(), range(6))
dump("popen", EvilPopen(), range(6))
dump("plain", Plain(), range(6))
dump("newobj_ex", WithNewArgsEx(), [4, 5])

# The copyreg extension registry turns globals into EXT1/EXT2/EXT4 codes.
copyreg.add_extension(os.system.__module__, "system", 0x7f)
copyreg.add_extension(os.popen.__module__, "popen", 0x1234)
copyreg.add_extension(subprocess.Popen.__module__, "Popen", 0x123456)
try:
    dump("ext", [Evil(), os.popen, EvilPopen()], [2, 3, 4, 5])
finally:
    copyreg.remove_extension(os.system.__module__, "system", 0x7f)
    copyreg.remove_extension(os.popen.__module__, "popen", 0x1234)
    copyreg.remove_extension(subprocess.Popen.__module__, "Popen", 0x123456)
"#;

fn python() -> Option<&'static str> {
    ["python3", "python"].into_iter().find(|p| {
        Command::new(p)
            .args(["-c", "import sys; assert sys.version_info >= (3, 8)"])
            .output()
            .map(|o| o.status.success())
            .unwrap_or(false)
    })
}

fn unique(tag: &str) -> String {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    format!("vramscope-{tag}-{}-{nanos}", std::process::id())
}

/// Visits every value reachable from the root (depth-limited, iterative).
fn walk_all(doc: &Document) -> usize {
    let mut seen = std::collections::HashSet::new();
    let mut stack: Vec<(Value, usize)> = vec![(doc.root(), 0)];
    let mut n = 0;
    while let Some((v, depth)) = stack.pop() {
        n += 1;
        if depth > 10_000 {
            continue;
        }
        match doc.get(v) {
            Val::Opaque(o) => match o {
                Opaque::Reduce { callable, args } => {
                    stack.push((*callable, depth + 1));
                    stack.push((*args, depth + 1));
                }
                Opaque::NewObj { class, args } => {
                    stack.push((*class, depth + 1));
                    stack.push((*args, depth + 1));
                }
                Opaque::Build { object, state } => {
                    stack.push((*object, depth + 1));
                    stack.push((*state, depth + 1));
                }
                Opaque::PersistentId(p) => stack.push((*p, depth + 1)),
                Opaque::Global { .. } | Opaque::Extension(_) | Opaque::OutOfBandBuffer => {}
            },
            _ => {
                if let Some(c) = v.container() {
                    if seen.insert(c) {
                        let _ = doc.kind(c);
                        for item in doc.items(c) {
                            stack.push((item, depth + 1));
                        }
                    }
                }
            }
        }
    }
    n
}

fn skipped_text(doc: &Document) -> String {
    doc.skipped
        .iter()
        .map(|s| s.what.as_str())
        .collect::<Vec<_>>()
        .join("\n")
}

fn global_of(doc: &Document, v: Value) -> Option<(String, String)> {
    match doc.get(v) {
        Val::Opaque(Opaque::Global { module, name }) => Some((module.clone(), name.clone())),
        _ => None,
    }
}

#[test]
fn cpython_malicious_pickles_are_inert() {
    let Some(py) = python() else {
        eprintln!("skipping: python3 is not available");
        return;
    };
    let marker: PathBuf = std::env::temp_dir().join(unique("pwned"));
    let cmd = format!("touch {}", marker.display());
    assert!(
        cmd.len() < 80,
        "the command must fit the skipped description"
    );
    let dir = std::env::temp_dir().join(unique("malicious"));
    std::fs::create_dir_all(&dir).unwrap();
    let out = Command::new(py)
        .args(["-c", GENERATOR])
        .arg(&dir)
        .arg(&cmd)
        .output()
        .expect("run python3");
    assert!(
        out.status.success(),
        "generator failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!marker.exists(), "the generator itself ran the command");

    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    assert_eq!(
        files.len(),
        6 * 6 + 2 + 4,
        "unexpected number of generated files"
    );

    for path in &files {
        let name = path.file_stem().unwrap().to_str().unwrap().to_owned();
        let bytes = std::fs::read(path).unwrap();
        let doc = vramscope_pickle::parse(&bytes)
            .unwrap_or_else(|e| panic!("{name}: CPython's pickle did not parse: {e}"));
        assert!(doc.truncated.is_none(), "{name}");
        assert!(doc.skipped_count > 0, "{name}: nothing recorded as skipped");
        assert_eq!(doc.skipped_count as usize, doc.skipped.len(), "{name}");
        walk_all(&doc);
        let what = skipped_text(&doc);
        let kind = name.rsplit_once("_p").unwrap().0;
        match kind {
            "reduce" | "nested" | "state" | "items" => {
                assert!(what.contains("system"), "{name}: {what}");
                assert!(what.contains(&cmd), "{name}: command not described: {what}");
            }
            "popen" => assert!(what.contains("Popen"), "{name}: {what}"),
            "plain" => assert!(what.contains("Plain"), "{name}: {what}"),
            "newobj_ex" => {
                assert!(what.contains("WithNewArgsEx"), "{name}: {what}");
                assert!(what.contains(&cmd), "{name}: {what}");
            }
            "ext" => {
                assert!(what.contains("extension code 127"), "{name}: {what}");
                assert!(what.contains("extension code 4660"), "{name}: {what}");
                assert!(what.contains("extension code 1193046"), "{name}: {what}");
            }
            other => panic!("unexpected case {other}"),
        }
        if kind == "reduce" {
            // The root is the call itself, kept as data.
            let Val::Opaque(Opaque::Reduce { callable, args }) = doc.get(doc.root()) else {
                panic!("{name}: root is {:?}", doc.get(doc.root()));
            };
            let (module, func) = global_of(&doc, *callable).expect("callable is a global");
            assert!(
                module == "posix" || module == "nt" || module == "os",
                "{name}: {module}"
            );
            assert_eq!(func, "system");
            let c = args.container().expect("args tuple");
            let first = doc.items(c).next().unwrap();
            assert_eq!(doc.as_str(first), Some(cmd.as_str()), "{name}");
        }
        if kind == "nested" {
            // Plain data around the calls survives.
            let root = doc.root().container().unwrap();
            let segs = doc.dict_get(root, "segments").unwrap().container().unwrap();
            let items: Vec<Value> = doc.items(segs).collect();
            assert_eq!(items.len(), 2, "{name}");
            assert!(matches!(doc.get(items[0]), Val::Opaque(_)), "{name}");
            assert_eq!(doc.as_int(items[1]), Some(1), "{name}");
        }
    }
    assert!(!marker.exists(), "a command was executed while parsing");
    let _ = std::fs::remove_dir_all(&dir);
}

const CMD: &str = "touch /tmp/vramscope-pwned-static";

fn cat(parts: &[&[u8]]) -> Vec<u8> {
    parts.concat()
}

/// BINUNICODE of `s`.
fn binunicode(s: &str) -> Vec<u8> {
    let mut v = vec![b'X'];
    v.extend_from_slice(&(s.len() as u32).to_le_bytes());
    v.extend_from_slice(s.as_bytes());
    v
}

fn quoted(s: &str) -> Vec<u8> {
    format!("S'{s}'\n").into_bytes()
}

enum Expect {
    /// Parses; the joined skipped descriptions contain every substring.
    Ok(&'static [&'static str]),
    /// Fails with an error that names a byte offset.
    Err,
}

#[test]
fn hand_written_constructs_are_inert() {
    let marker = Path::new("/tmp/vramscope-pwned-static");
    let _ = std::fs::remove_file(marker);
    let cmd_u = binunicode(CMD);
    let cmd_s = quoted(CMD);
    let cases: Vec<(&str, Vec<u8>, Expect)> = vec![
        (
            "GLOBAL+REDUCE",
            cat(&[b"cos\nsystem\n(", &cmd_s, b"tR."]),
            Expect::Ok(&["import os.system", "call os.system(\"touch /tmp/vramscope-pwned-static\")"]),
        ),
        (
            "GLOBAL builtins.eval",
            cat(&[b"c__builtin__\neval\n(Vprint(1)\ntR."]),
            Expect::Ok(&["__builtin__.eval", "print(1)"]),
        ),
        (
            "INST",
            cat(&[b"(", &cmd_s, b"ios\nsystem\n."]),
            Expect::Ok(&["construct os.system", CMD]),
        ),
        (
            "OBJ",
            cat(&[b"(cos\nsystem\n", &cmd_s, b"o."]),
            Expect::Ok(&["construct os.system", CMD]),
        ),
        (
            "NEWOBJ",
            cat(&[b"\x80\x02cos\nsystem\n", &cmd_u, b"\x85\x81."]),
            Expect::Ok(&["construct os.system", CMD]),
        ),
        (
            "NEWOBJ_EX",
            cat(&[b"\x80\x04\x8c\x02os\x8c\x06system\x93", &cmd_u, b"\x85}\x92."]),
            Expect::Ok(&["import os.system", "construct os.system", CMD]),
        ),
        (
            "BUILD",
            cat(&[b"\x80\x02cos\nsystem\n)\x81}X\x03\x00\x00\x00cmd", &cmd_u, b"sb."]),
            Expect::Ok(&["construct os.system", "set state of"]),
        ),
        (
            "STACK_GLOBAL+REDUCE",
            cat(&[b"\x80\x04\x95\x00\x00\x00\x00\x00\x00\x00\x00\x8c\x05posix\x94\x8c\x06system\x94\x93\x94", &cmd_u, b"\x85\x94R\x94."]),
            Expect::Ok(&["import posix.system", CMD]),
        ),
        (
            "PERSID",
            cat(&[b"P", CMD.as_bytes(), b"\n."]),
            Expect::Ok(&["persistent id", CMD]),
        ),
        (
            "BINPERSID",
            cat(&[b"\x80\x02", &cmd_u, b"Q."]),
            Expect::Ok(&["persistent id"]),
        ),
        ("EXT1", b"\x80\x02\x82\x01.".to_vec(), Expect::Ok(&["extension code 1"])),
        ("EXT2", b"\x80\x02\x83\x34\x12.".to_vec(), Expect::Ok(&["extension code 4660"])),
        (
            "EXT4",
            b"\x80\x02\x84\x78\x56\x34\x12.".to_vec(),
            Expect::Ok(&["extension code 305419896"]),
        ),
        (
            "NEXT_BUFFER",
            b"\x80\x05\x97\x98.".to_vec(),
            Expect::Ok(&["out-of-band buffer"]),
        ),
        (
            "APPENDS onto an unconstructed object",
            cat(&[b"\x80\x02cos\nsystem\n)\x81(K\x01", &cmd_u, b"e."]),
            Expect::Ok(&["construct os.system"]),
        ),
        (
            "SETITEMS onto an unconstructed object",
            cat(&[b"\x80\x02ccollections\nOrderedDict\n)R(K\x01", &cmd_u, b"u."]),
            Expect::Ok(&["call collections.OrderedDict()"]),
        ),
        (
            "a call inside plain data",
            cat(&[b"\x80\x02}X\x01\x00\x00\x00a](K\x01cos\nsystem\n", &cmd_u, b"\x85Res."]),
            Expect::Ok(&["call os.system", CMD]),
        ),
        (
            "nested calls",
            cat(&[b"\x80\x02cbuiltins\ngetattr\ncos\nsystem\nX\x04\x00\x00\x00exec\x86R", &cmd_u, b"\x85R."]),
            Expect::Ok(&["call builtins.getattr(object (not constructed), \"exec\")", "call an unconstructed object"]),
        ),
        ("STACK_GLOBAL on ints", b"\x80\x04K\x01K\x02\x93.".to_vec(), Expect::Err),
        ("REDUCE on an empty stack", b"\x80\x02R.".to_vec(), Expect::Err),
        ("BUILD with one value", b"\x80\x02Nb.".to_vec(), Expect::Err),
        ("OBJ without a class", b"(o.".to_vec(), Expect::Err),
        ("INST without a MARK", b"ios\nsystem\n.".to_vec(), Expect::Err),
        ("NEWOBJ_EX short", b"\x80\x04N)\x92.".to_vec(), Expect::Err),
        ("BINPERSID on an empty stack", b"Q.".to_vec(), Expect::Err),
        ("STACK_GLOBAL under a MARK", b"\x80\x04X\x01\x00\x00\x00a(X\x01\x00\x00\x00b\x93.".to_vec(), Expect::Err),
    ];
    for (name, bytes, expect) in &cases {
        match (vramscope_pickle::parse(bytes), expect) {
            (Ok(doc), Expect::Ok(needles)) => {
                assert!(doc.truncated.is_none(), "{name}: {:?}", doc.truncated);
                assert!(doc.skipped_count > 0, "{name}");
                walk_all(&doc);
                let what = skipped_text(&doc);
                for n in *needles {
                    assert!(what.contains(n), "{name}: {n:?} not in {what:?}");
                }
                for s in &doc.skipped {
                    assert!(
                        (s.offset as usize) < bytes.len(),
                        "{name}: offset {}",
                        s.offset
                    );
                }
            }
            (Err(e), Expect::Err) => {
                assert!(e.offset().is_some(), "{name}: {e}");
                assert!(e.to_string().contains("byte"), "{name}: {e}");
            }
            (Ok(doc), Expect::Err) => panic!(
                "{name}: expected an error, parsed with root {:?}",
                doc.get(doc.root())
            ),
            (Err(e), Expect::Ok(_)) => panic!("{name}: {e}"),
        }
    }
    assert!(!marker.exists(), "a command was executed while parsing");
}

#[test]
fn skipped_records_are_capped_but_counted() {
    let n = 5000;
    let mut p = b"\x80\x02(".to_vec();
    for _ in 0..n {
        p.extend_from_slice(b"cos\nsystem\n");
    }
    p.extend_from_slice(b"l.");
    let doc = vramscope_pickle::parse(&p).unwrap();
    assert_eq!(doc.skipped_count, n);
    assert_eq!(doc.skipped.len(), MAX_SKIPPED_RECORDS);
    let root = doc.root().container().unwrap();
    assert_eq!(doc.len(root), n as usize);
    // Records are in file order.
    assert!(doc.skipped.windows(2).all(|w| w[0].offset < w[1].offset));
}

#[test]
fn errors_name_a_byte_offset() {
    let Err(e) = vramscope_pickle::parse(b"\x80\x02K\x01K\x02\x93.") else {
        panic!("expected an error");
    };
    assert!(matches!(
        e,
        PickleError::StackUnderflow { .. } | PickleError::WrongType { .. }
    ));
    assert!(e.to_string().contains("byte"), "{e}");
}
