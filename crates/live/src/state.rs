//! The state a live recording publishes (docs/live-protocol.md, version 1).
//!
//! Parsing is tolerant in both directions: keys this version does not know
//! are ignored (a newer publisher only adds keys), and every key a viewer
//! can do without has a default, so a publisher that leaves out, say,
//! `dumps` still gives a usable state. Only what the screen cannot be
//! drawn without is required: `version`, `time_us`, `allocated`,
//! `reserved`.

use serde::{Deserialize, Serialize};

use crate::LiveError;

/// The oldest (and so far only) state version this reader understands.
pub const VERSION: u64 = 1;

/// Iterations over which [`State::growth_per_iteration`] fits its slope,
/// as `vramscope leaks` does on a snapshot.
pub const GROWTH_WINDOW: usize = 20;

/// One publication of a live recording.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct State {
    pub version: u64,
    #[serde(default)]
    pub pid: u32,
    #[serde(default)]
    pub host: String,
    #[serde(default)]
    pub rank: u32,
    #[serde(default)]
    pub local_rank: u32,
    #[serde(default = "one")]
    pub world_size: u32,
    #[serde(default)]
    pub device: String,
    #[serde(default)]
    pub recorder: String,
    pub time_us: i64,
    #[serde(default)]
    pub seq: u64,
    #[serde(default)]
    pub iteration: u64,
    pub allocated: u64,
    pub reserved: u64,
    #[serde(default)]
    pub peak_allocated: u64,
    #[serde(default)]
    pub peak_reserved: u64,
    #[serde(default)]
    pub capacity: Option<u64>,
    /// Free device memory as the driver said when the state was taken
    /// (`mem_get_info`; CUDA only): with `capacity` and `reserved`, what
    /// lies outside PyTorch.
    #[serde(default)]
    pub device_free: Option<u64>,
    /// Bytes per category, in the publisher's order (`parameter`,
    /// `gradient`, ... as sent), so the bar keeps a stable layout.
    #[serde(default)]
    pub categories: Categories,
    #[serde(default)]
    pub top: Vec<Holder>,
    #[serde(default)]
    pub iterations: Vec<Iteration>,
    #[serde(default)]
    pub ooms: Vec<Oom>,
    #[serde(default)]
    pub dumps: Vec<Dump>,
    #[serde(default)]
    pub publish_us: u64,
}

fn one() -> u32 {
    1
}

/// `categories`: name → bytes, in the order the publisher wrote them (a
/// map would sort them and reorder the bar from one state to the next).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Categories(pub Vec<(String, u64)>);

impl<'de> Deserialize<'de> for Categories {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = Categories;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("an object of category name to bytes")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut m: A,
            ) -> Result<Categories, A::Error> {
                let mut out = Vec::new();
                while let Some((k, v)) = m.next_entry::<String, u64>()? {
                    out.push((k, v));
                }
                Ok(Categories(out))
            }
            fn visit_unit<E: serde::de::Error>(self) -> Result<Categories, E> {
                Ok(Categories::default())
            }
        }
        d.deserialize_any(V)
    }
}

impl Serialize for Categories {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut m = s.serialize_map(Some(self.0.len()))?;
        for (k, v) in &self.0 {
            m.serialize_entry(k, v)?;
        }
        m.end()
    }
}

/// One of the largest holders: an allocation site and what it holds now.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Holder {
    #[serde(default)]
    pub site: String,
    #[serde(default)]
    pub bytes: u64,
    #[serde(default)]
    pub blocks: u64,
    /// Innermost frame first.
    #[serde(default)]
    pub stack: Vec<String>,
}

/// A finished iteration.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Iteration {
    pub n: u64,
    #[serde(default)]
    pub end_us: i64,
    /// Allocated at the end of the iteration.
    pub allocated: u64,
    #[serde(default)]
    pub reserved: u64,
    /// The highest allocated seen during the iteration.
    #[serde(default)]
    pub peak: u64,
}

/// An out-of-memory event.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Oom {
    #[serde(default)]
    pub time_us: i64,
    #[serde(default)]
    pub requested: Option<u64>,
    #[serde(default)]
    pub device_free: Option<u64>,
}

/// A snapshot the recording wrote.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Dump {
    #[serde(default)]
    pub time_us: i64,
    #[serde(default)]
    pub path: String,
    #[serde(default)]
    pub reason: String,
}

impl State {
    /// Parse one state; `origin` says where it came from, for the error.
    pub fn parse(text: &str, origin: &str) -> Result<State, LiveError> {
        let state: State = serde_json::from_str(text).map_err(|e| LiveError::BadState {
            origin: origin.to_string(),
            message: e.to_string(),
        })?;
        if state.version < VERSION {
            return Err(LiveError::BadState {
                origin: origin.to_string(),
                message: format!(
                    "expected version {VERSION} or later, found {}",
                    state.version
                ),
            });
        }
        Ok(state)
    }

    /// Bytes per iteration: the least-squares slope of `allocated` at the
    /// end of each iteration against its number `n`, over the last
    /// [`GROWTH_WINDOW`] iterations. `None` with fewer than two (or when
    /// they all have the same `n`, where no slope exists).
    pub fn growth_per_iteration(&self) -> Option<f64> {
        let from = self.iterations.len().saturating_sub(GROWTH_WINDOW);
        slope(&self.iterations[from..])
    }

    /// Device memory outside PyTorch's allocator (this process's CUDA
    /// context, NCCL, other allocators, other processes): capacity − free
    /// − reserved, where the state has the device's figures.
    pub fn outside_pytorch(&self) -> Option<u64> {
        let (c, f) = (self.capacity?, self.device_free?);
        Some(c.saturating_sub(f).saturating_sub(self.reserved))
    }

    /// The percentage of the device in use (reserved / capacity).
    pub fn used_fraction(&self) -> Option<f64> {
        match self.capacity {
            Some(c) if c > 0 => Some(self.reserved as f64 / c as f64),
            _ => None,
        }
    }
}

fn slope(its: &[Iteration]) -> Option<f64> {
    if its.len() < 2 {
        return None;
    }
    let k = its.len() as f64;
    let mx = its.iter().map(|i| i.n as f64).sum::<f64>() / k;
    let my = its.iter().map(|i| i.allocated as f64).sum::<f64>() / k;
    let (mut sxy, mut sxx) = (0.0, 0.0);
    for i in its {
        let dx = i.n as f64 - mx;
        sxy += dx * (i.allocated as f64 - my);
        sxx += dx * dx;
    }
    (sxx > 0.0).then(|| sxy / sxx)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The example of docs/live-protocol.md, with a key this version does
    /// not know (`future_key`) that must be ignored.
    pub(crate) const EXAMPLE: &str = r#"{
      "version": 1, "pid": 4242, "host": "node1", "rank": 3, "local_rank": 3, "world_size": 8,
      "device": "cuda:3", "recorder": "cuda", "time_us": 1732538010000000, "seq": 20,
      "iteration": 12, "allocated": 1610612736, "reserved": 2147483648,
      "peak_allocated": 1879048192, "peak_reserved": 2147483648, "capacity": 85899345920,
      "categories": {"parameter": 1073741824, "gradient": 268435456, "optimizer_state": 0,
                     "input": 1048576, "other": 267386880},
      "top": [
        {"site": "train.py:41 in step", "bytes": 1073741824, "blocks": 12,
         "stack": ["train.py:41 in step", "train.py:80 in <module>"]},
        {"site": "model.py:7 in forward", "bytes": 536870912, "blocks": 3,
         "stack": ["model.py:7 in forward", "train.py:40 in step", "train.py:80 in <module>"]}
      ],
      "iterations": [
        {"n": 10, "end_us": 1732538008000000, "allocated": 1500000000, "reserved": 2147483648, "peak": 1800000000},
        {"n": 11, "end_us": 1732538009000000, "allocated": 1501048576, "reserved": 2147483648, "peak": 1800000000}
      ],
      "ooms": [{"time_us": 1732538009500000, "requested": 4294967296, "device_free": null}],
      "dumps": [{"time_us": 1732538009600000, "path": "/tmp/oom.pickle", "reason": "oom"}],
      "publish_us": 850,
      "future_key": {"anything": [1, 2, 3]}
    }"#;

    #[test]
    fn parses_the_documented_example() {
        let s = State::parse(EXAMPLE, "test").unwrap();
        assert_eq!(
            (s.pid, s.host.as_str(), s.rank, s.world_size),
            (4242, "node1", 3, 8)
        );
        assert_eq!(s.device, "cuda:3");
        assert_eq!(s.allocated, 1_610_612_736);
        assert_eq!(s.capacity, Some(85_899_345_920));
        assert_eq!(s.categories.0[0], ("parameter".to_string(), 1 << 30));
        assert_eq!(s.categories.0.iter().map(|c| c.1).sum::<u64>(), s.allocated);
        assert_eq!(s.top[1].stack.len(), 3);
        assert_eq!(s.ooms[0].requested, Some(4 << 30));
        assert_eq!(s.ooms[0].device_free, None);
        assert_eq!(s.dumps[0].reason, "oom");
        assert_eq!(s.publish_us, 850);
        // Two iterations 1 MiB apart: 1 MiB per iteration.
        assert_eq!(s.growth_per_iteration(), Some(1_048_576.0));
    }

    /// An H200 run alone on its GPU: 2.5 GiB reserved, 750 MiB held by the
    /// CUDA context, the rest free.
    #[test]
    fn what_lies_outside_pytorch_is_the_device_less_free_and_reserved() {
        const MIB: u64 = 1 << 20;
        let (total, reserved) = (150_109_880_320u64, 2560 * MIB);
        let free = total - reserved - 750 * MIB;
        let s = State::parse(
            &format!(
                r#"{{"version": 1, "time_us": 5, "allocated": 10, "reserved": {reserved},
                    "capacity": {total}, "device_free": {free}}}"#
            ),
            "test",
        )
        .unwrap();
        assert_eq!(s.outside_pytorch(), Some(750 * MIB));
        // A publisher of an older version sends no device_free: nothing is said.
        let old = State::parse(
            r#"{"version": 1, "time_us": 5, "allocated": 10, "reserved": 20, "capacity": 100}"#,
            "test",
        )
        .unwrap();
        assert_eq!(old.outside_pytorch(), None);
    }

    #[test]
    fn missing_optional_keys_take_defaults() {
        let s = State::parse(
            r#"{"version": 1, "time_us": 5, "allocated": 10, "reserved": 20, "capacity": null}"#,
            "test",
        )
        .unwrap();
        assert_eq!((s.world_size, s.capacity, s.top.len()), (1, None, 0));
        assert!(s.categories.0.is_empty());
        assert_eq!(s.growth_per_iteration(), None);
    }

    #[test]
    fn errors_say_what_and_where() {
        let e = State::parse(r#"{"version": 1, "time_us": 5}"#, "127.0.0.1:9").unwrap_err();
        let m = e.to_string();
        assert!(m.contains("127.0.0.1:9") && m.contains("allocated"), "{m}");
        let e = State::parse(
            r#"{"version": 0, "time_us": 5, "allocated": 1, "reserved": 1}"#,
            "f.json",
        )
        .unwrap_err();
        assert!(e.to_string().contains("found 0"), "{e}");
    }

    fn its(points: &[(u64, u64)]) -> State {
        let mut s = State::parse(EXAMPLE, "test").unwrap();
        s.iterations = points
            .iter()
            .map(|&(n, a)| Iteration {
                n,
                end_us: 0,
                allocated: a,
                reserved: 0,
                peak: 0,
            })
            .collect();
        s
    }

    #[test]
    fn growth_is_the_least_squares_slope_of_the_last_20() {
        // y = 1000 + 3n with noise symmetric around the line: slope 3.
        let pts: Vec<(u64, u64)> = (0..10)
            .map(|n| (n, 1000 + 3 * n + if n % 2 == 0 { 1 } else { 0 }))
            .collect();
        let g = its(&pts).growth_per_iteration().unwrap();
        // Known fit of x=0..9, y=1000+3x+[1,0,1,0,...]: slope 3 - 1/33.
        assert!((g - (3.0 - 1.0 / 33.0)).abs() < 1e-9, "{g}");

        // 30 iterations: the first 10 grow fast, the last 20 are flat, so
        // only the window counts.
        let pts: Vec<(u64, u64)> = (0..30)
            .map(|n| (n, if n < 10 { n * 1_000_000 } else { 9_000_000 }))
            .collect();
        assert_eq!(its(&pts).growth_per_iteration(), Some(0.0));

        // Shrinking memory gives a negative slope.
        let pts = [(1, 500), (2, 300), (3, 100)];
        assert_eq!(its(&pts).growth_per_iteration(), Some(-200.0));

        assert_eq!(its(&[(1, 5)]).growth_per_iteration(), None);
        assert_eq!(its(&[(1, 5), (1, 9)]).growth_per_iteration(), None);
    }
}
