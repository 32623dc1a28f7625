#!/usr/bin/env python3
"""Random pickles plus a canonical text form, for the differential test.

Usage: gen_random_pickles.py [--seed N] [--count N] [--protocols 0,1,2,3,4,5] OUT_DIR

For case i it builds a random object for protocol p (cycling through the
protocols), writes `c{i:05}_p{p}.pickle` made by `pickle.dumps(obj, protocol=p)`
and `c{i:05}_p{p}.txt` holding the canonical form of `obj`. The Rust side
(tests/differential.rs) decodes each pickle and renders the same form.

Canonical form (both sides must agree byte for byte):
  None          N
  bool          B1 / B0
  int           I<decimal>
  float         F<16 hex digits of the IEEE-754 bits>
  str           $<n>=U"<hex of UTF-8>"       later: @<n>
                (strings of at most 15 UTF-8 bytes: U"<hex>", no label; the
                reader interns those by content, and str identity carries
                no meaning in Python)
  bytes         $<n>=Y"<hex>"                later: @<n>
  bytearray     $<n>=A"<hex>"                later: @<n>
  list          #<n>=L[a,b,...]              later: @<n>
  tuple         #<n>=T(a,b,...)              later: @<n>   (empty: T(), no label)
  dict          #<n>=D{k:v,k:v,...}          later: @<n>
  set           #<n>=S{a,b,...}              later: @<n>
  frozenset     #<n>=F{a,b,...}              later: @<n>
Labels count up from 0 in walk order (depth first, items in order), one
counter for all labelled objects; an object gets its label before its items
are walked, so cycles terminate. Identity is Python's `id()`, which is exactly
what the pickler's memo uses: every object above except the empty tuple is
memoised by the pickler, so the decoded document shares exactly these.
Set items are walked in iteration order, which is the order the pickler
writes them in.

Only the standard library is used.
"""

import argparse
import math
import os
import pickle
import random
import struct
import sys

sys.setrecursionlimit(20000)

INT_EDGES = []
for b in (7, 8, 15, 16, 31, 32, 59, 60, 63, 64, 127, 128, 255, 256):
    for d in (-1, 0, 1):
        INT_EDGES.append((1 << b) + d)
        INT_EDGES.append(-(1 << b) + d)
INT_EDGES += [0, 1, -1, 255, 256, 65535, 65536, 10**18, -(10**18), 10**40, -(10**40)]

FLOAT_EDGES = [
    0.0, -0.0, 1.0, -1.0, 0.5, 1e-300, -1e300, 5e-324, 1.7976931348623157e308,
    2.2250738585072014e-308, math.pi, float("inf"), float("-inf"), float("nan"),
    123456789.125, 1e16, 0.1,
]

# Characters from every UTF-8 length class; no surrogates (U+D800..U+DFFF).
ALPHABET = (
    list("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789 _.-")
    + ["\x00", "\n", "\r", "\t", "\\", "'", '"', "\x1a", "\x7f", "\x80", "\xe9", "\xff"]
    + ["\u0100", "\u0301", "\u20ac", "\u4e2d", "\u6587", "\uffff", "\ufeff", "\ud7ff", "\ue000"]
    + ["\U0001f600", "\U0001d11e", "\U00010000", "\U0010ffff"]
)


class Gen:
    def __init__(self, rng, protocol):
        self.rng = rng
        self.p = protocol
        # Objects that may be referenced again (sharing, cycles).
        self.any_pool = []  # any object, including unfinished lists/dicts/sets
        self.hashable_pool = []  # finished hashable objects (str, bytes, tuples, frozensets)
        self.budget = rng.choice([20, 60, 200, 600])
        # At most one string or bytes object longer than a protocol 4 frame.
        self.big_left = 1 if rng.random() < 0.1 else 0

    def big(self):
        if self.big_left and self.rng.random() < 0.05:
            self.big_left -= 1
            return True
        return False

    # ----- atoms -----

    def int_(self):
        r = self.rng
        k = r.random()
        if k < 0.35:
            return r.randint(-300, 300)
        if k < 0.6:
            return r.choice(INT_EDGES)
        if k < 0.8:
            return r.randint(-(1 << 64), 1 << 64)
        if k < 0.995:
            bits = r.randint(65, 400)
            return r.randint(-(1 << bits), 1 << bits)
        # Long enough for LONG4 (more than 255 bytes); protocol 0 writes the
        # decimal text, which CPython caps at 4300 digits.
        bits = r.randint(2041, 9000 if self.p >= 1 else 14000)
        return r.choice((1, -1)) * r.getrandbits(bits)

    def float_(self):
        r = self.rng
        k = r.random()
        if k < 0.4:
            f = r.choice(FLOAT_EDGES)
        elif k < 0.7:
            f = r.uniform(-1e6, 1e6)
        else:
            # Any bit pattern that is a float (keeps NaN payloads and signs).
            f = struct.unpack(">d", r.getrandbits(64).to_bytes(8, "big"))[0]
        if self.p == 0 and math.isnan(f):
            # Protocol 0 writes repr(), which drops NaN sign and payload.
            f = float("nan")
        return f

    def str_(self):
        r = self.rng
        k = r.random()
        if k < 0.1:
            return ""
        if self.big():
            n = r.randint(60000, 70000)  # crosses a protocol 4 frame
        elif k < 0.5:
            n = r.randint(1, 8)
        elif k < 0.9:
            n = r.randint(1, 40)
        else:
            n = r.randint(41, 300)
        if r.random() < 0.3:
            return "".join(r.choice("abcdefghij_") for _ in range(n))
        return "".join(r.choice(ALPHABET) for _ in range(n))

    def bytes_(self):
        r = self.rng
        k = r.random()
        if k < 0.1:
            return b""
        if self.big():
            return r.randbytes(r.randint(60000, 70000))
        return r.randbytes(r.randint(1, 40) if r.random() < 0.9 else r.randint(41, 300))

    def atom(self):
        r = self.rng
        choices = ["none", "bool", "int", "int", "float", "str", "str"]
        if self.p >= 3:
            choices.append("bytes")
        if self.p >= 5:
            choices.append("bytearray")
        c = r.choice(choices)
        if c == "none":
            return None
        if c == "bool":
            return r.random() < 0.5
        if c == "int":
            return self.int_()
        if c == "float":
            return self.float_()
        if c == "str":
            s = self.str_()
            self.hashable_pool.append(s)
            self.any_pool.append(s)
            return s
        if c == "bytes":
            b = self.bytes_()
            self.hashable_pool.append(b)
            self.any_pool.append(b)
            return b
        b = bytearray(self.bytes_())
        self.any_pool.append(b)
        return b

    # ----- hashable values (dict keys, set items) -----

    def hashable(self, depth):
        r = self.rng
        if self.hashable_pool and r.random() < 0.25:
            return r.choice(self.hashable_pool)
        k = r.random()
        if k < 0.35:
            s = self.str_() if r.random() < 0.3 else "".join(r.choice(ALPHABET) for _ in range(r.randint(0, 6)))
            self.hashable_pool.append(s)
            return s
        if k < 0.6:
            return self.int_()
        if k < 0.65:
            return self.float_()
        if k < 0.7:
            return r.choice([None, True, False])
        if k < 0.75 and self.p >= 3:
            b = self.bytes_()
            self.hashable_pool.append(b)
            return b
        if k < 0.9 and depth > 0:
            n = r.choice([0, 1, 2, 3, 4, 5])
            t = tuple(self.hashable(depth - 1) for _ in range(n))
            if t:
                self.hashable_pool.append(t)
            return t
        if depth > 0 and self.p >= 4:
            fs = frozenset(self.hashable(depth - 1) for _ in range(r.randint(0, 5)))
            self.hashable_pool.append(fs)
            return fs
        return self.int_()

    # ----- any value -----

    def size(self):
        r = self.rng
        k = r.random()
        if k < 0.15:
            return 0
        if k < 0.9:
            return r.randint(1, 6)
        if k < 0.985:
            return r.randint(7, 40)
        # More than 1000 items: the pickler writes several APPENDS/SETITEMS/ADDITEMS batches.
        return r.randint(1001, 2600)

    def value(self, depth):
        r = self.rng
        self.budget -= 1
        if self.any_pool and r.random() < 0.15:
            return r.choice(self.any_pool)
        if depth <= 0 or self.budget <= 0 or r.random() < 0.45:
            return self.atom()
        kinds = ["list", "list", "dict", "dict", "tuple", "tuple"]
        if self.p >= 4:
            kinds += ["set", "frozenset"]
        kind = r.choice(kinds)
        n = self.size()
        if n > 40:
            # Big containers hold atoms only, to keep files small.
            depth = 1
        if kind == "list":
            out = []
            self.any_pool.append(out)
            for _ in range(n):
                out.append(self.value(depth - 1))
            if r.random() < 0.05:
                out.append(out)  # contains itself
            return out
        if kind == "dict":
            out = {}
            self.any_pool.append(out)
            for _ in range(n):
                out[self.hashable(2)] = self.value(depth - 1)
            if r.random() < 0.05:
                out["self"] = out
            return out
        if kind == "tuple":
            # Items may be unfinished lists/dicts from the pool: a cycle
            # through a tuple, which the pickler resolves with POP/POP_MARK + GET.
            t = tuple(self.value(depth - 1) for _ in range(min(n, 50)))
            if t:
                self.any_pool.append(t)
                try:
                    hash(t)
                    self.hashable_pool.append(t)
                except TypeError:
                    pass
            return t
        if kind == "set":
            s = set()
            self.any_pool.append(s)
            for _ in range(n):
                s.add(self.hashable(2))
            return s
        fs = frozenset(self.hashable(2) for _ in range(n))
        self.any_pool.append(fs)
        self.hashable_pool.append(fs)
        return fs

    def special(self):
        """Structures a random walk rarely produces."""
        r = self.rng
        k = r.randint(0, 5)
        if k == 0:
            # Deep nesting.
            depth = r.randint(50, 400)
            root = []
            cur = root
            for _ in range(depth):
                nxt = [] if r.random() < 0.7 else {}
                if isinstance(cur, list):
                    cur.append(nxt)
                else:
                    cur[r.randint(0, 3)] = nxt
                cur = nxt
            if isinstance(cur, list):
                cur.append(root)  # cycle from the bottom to the top
            else:
                cur["top"] = root
            return root
        if k == 1:
            # More than 256 memo entries, then references back (LONG_BINGET).
            strs = [self.str_() or "x%d" % i for i in range(r.randint(257, 900))]
            lists = [[i] for i in range(r.randint(10, 300))]
            back = [r.choice(strs) for _ in range(200)] + [r.choice(lists) for _ in range(100)]
            return [strs, lists, back, (strs[0], lists[0])]
        if k == 2:
            # A tuple cycle with more than 3 items (MARK ... POP_MARK + GET at protocol >= 1).
            lst = []
            t = (1, lst, "x", lst, None)
            lst.append(t)
            lst.append(lst)
            return {"t": t, "l": lst, "again": [t, t]}
        if k == 3:
            # Mutually recursive dicts and lists.
            a, b = {}, []
            a["b"] = b
            b.append(a)
            b.append(b)
            a["a"] = a
            return (a, b, (a,), ((b,),))
        if k == 4:
            # A snapshot-like record.
            frames = [
                {"filename": "/usr/lib/python3/site-packages/torch/nn/%d.py" % i, "line": i, "name": "forward"}
                for i in range(r.randint(1, 8))
            ]
            blocks = [
                {"size": r.randint(0, 1 << 34), "requested_size": 512, "address": r.randint(1 << 40, 1 << 47), "state": r.choice(["active_allocated", "inactive"]), "frames": frames}
                for _ in range(r.randint(1, 30))
            ]
            return {"segments": [{"device": 0, "address": 1 << 45, "total_size": 1 << 31, "blocks": blocks}], "device_traces": [[]]}
        # Shared string used as key and value everywhere.
        s = self.str_() or "k"
        return {s: [s, s, (s, s)], "other": {s: s}}


def canonical(obj):
    out = []
    labels = {}
    counter = [0]

    def label(o, prefix):
        oid = id(o)
        if oid in labels:
            out.append("@%d" % labels[oid])
            return False
        labels[oid] = counter[0]
        out.append("%s%d=" % (prefix, counter[0]))
        counter[0] += 1
        return True

    def walk(o):
        t = type(o)
        if o is None:
            out.append("N")
        elif t is bool:
            out.append("B1" if o else "B0")
        elif t is int:
            out.append("I%d" % o)
        elif t is float:
            out.append("F%016x" % struct.unpack(">Q", struct.pack(">d", o))[0])
        elif t is str:
            b = o.encode("utf-8")
            if len(b) <= 15:
                out.append('U"%s"' % b.hex())
            elif label(o, "$"):
                out.append('U"%s"' % b.hex())
        elif t is bytes:
            if label(o, "$"):
                out.append('Y"%s"' % o.hex())
        elif t is bytearray:
            if label(o, "$"):
                out.append('A"%s"' % o.hex())
        elif t is tuple and not o:
            out.append("T()")
        elif t in (list, tuple, set, frozenset):
            if label(o, "#"):
                open_, close = {list: ("L[", "]"), tuple: ("T(", ")"), set: ("S{", "}"), frozenset: ("F{", "}")}[t]
                out.append(open_)
                for i, x in enumerate(o):
                    if i:
                        out.append(",")
                    walk(x)
                out.append(close)
        elif t is dict:
            if label(o, "#"):
                out.append("D{")
                for i, (k, v) in enumerate(o.items()):
                    if i:
                        out.append(",")
                    walk(k)
                    out.append(":")
                    walk(v)
                out.append("}")
        else:
            raise TypeError("unexpected type %r" % t)

    walk(obj)
    return "".join(out)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--count", type=int, default=3000)
    ap.add_argument("--protocols", default="0,1,2,3,4,5")
    ap.add_argument("out")
    args = ap.parse_args()
    protocols = [int(p) for p in args.protocols.split(",")]
    os.makedirs(args.out, exist_ok=True)
    for i in range(args.count):
        p = protocols[i % len(protocols)]
        rng = random.Random("%d:%d" % (args.seed, i))
        g = Gen(rng, p)
        if rng.random() < 0.1:
            obj = g.special()
        else:
            obj = g.value(rng.choice([1, 2, 3, 4, 6, 8]))
        data = pickle.dumps(obj, protocol=p)
        text = canonical(obj)
        base = os.path.join(args.out, "c%05d_p%d" % (i, p))
        with open(base + ".pickle", "wb") as f:
            f.write(data)
        with open(base + ".txt", "w", encoding="ascii") as f:
            f.write(text)


if __name__ == "__main__":
    main()
