//! What vramscope's recorder adds to a snapshot under the `vramscope` key:
//! the backend, the device's own counters, compilations, and what held each
//! tensor alive at the end.

/// What vramscope's recorder wrote about the recording (the `vramscope`
/// key, which other readers ignore).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RecorderInfo {
    /// `cuda-allocator-history`, `xpu-allocator-history`, `cpu-allocator`, `dispatch` or
    /// `cpu-profiler`.
    pub name: String,
    /// The device type a dispatch recording followed (`cpu`, `mps`, ...).
    pub device_type: Option<String>,
    pub steps: Option<u64>,
    /// The PyTorch version that ran.
    pub torch: Option<String>,
    /// The device allocator's own figures, read during the recording.
    pub counters: Vec<DeviceCounter>,
    /// Compilations `torch.compile` ran while the recording ran (Dynamo's
    /// compile callbacks; absent in files of older recorders).
    pub compilations: Option<u64>,
    /// Profiler windows whose memory analysis failed inside PyTorch (their
    /// allocations are missing), one reason each.
    pub profiler_failures: Vec<String>,
    /// What held each tensor alive when the snapshot was written, and at
    /// the moments the recorder looked while the program ran (`time_us` of
    /// each); empty in files of older recorders and in periodic dumps.
    pub holders: Vec<Holder>,
    /// How the search for holders went, when it ran.
    pub holder_scan: Option<HolderScan>,
    /// The optimizers that stepped and what each keeps (empty in files of
    /// older recorders).
    pub optimizers: Vec<OptimizerInfo>,
    /// The device as the recorder saw it when it wrote the file (absent in
    /// PyTorch's own files and older recorders').
    pub device: Option<DeviceFacts>,
    /// Out-of-memory errors the allocator's observer saw, in order.
    pub ooms: Vec<OomSeen>,
    /// How much of the recording the trace holds (the `history` key;
    /// absent in files of older recorders).
    pub history: Option<History>,
    /// The autocast states the model's outermost forward calls ran under
    /// (`off`, `bfloat16`, `float16`); empty where not recorded. A snapshot
    /// records sizes, not dtypes: this says whether activations are 16-bit.
    pub autocast: Vec<String>,
    /// Calls that ask for fp32 of a tensor that already is fp32
    /// (`logits.float()`): nothing in this run, an fp32 copy in a 16-bit
    /// one (the `upcasts` key; CPU allocator recorder only).
    pub upcasts: Vec<Upcast>,
    /// Which code is which module of the model (the `modules` key; empty
    /// in PyTorch's own files and older recorders'): what names the part
    /// of a model whose frames a stack shows only as `forward`.
    pub modules: Vec<ModuleCode>,
    /// The model's parameters by the module that owns them (the
    /// `parameters` key; empty in PyTorch's own files and older
    /// recorders'): what sharding advice gathers by block where some
    /// parameters are frozen and the gradients cannot tell.
    pub parameters: Vec<ParameterGroup>,
    /// The source lines `torch.compile`'s generated modules compute (the
    /// `generated` key); the reader has put them into the stacks.
    pub generated: Vec<GeneratedCode>,
    /// `"events"`: the trace holds one entry per allocation (`alloc`) and
    /// per free (`free_completed`) of an allocator that caches nothing; the
    /// reader adds the entries PyTorch would write around them
    /// (`segment_alloc`; `free_requested`, `segment_free`). `None`: the
    /// trace is as PyTorch writes it.
    pub trace_form: Option<String>,
    /// The recording process's children that trained or used a GPU and
    /// were not recorded (the `children` key; empty where none did).
    pub children: Vec<crate::children::ChildProcess>,
}

/// Where a program asked for fp32 of a tensor that already was fp32, how
/// often, and the largest such tensor's bytes.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Upcast {
    pub file: String,
    pub line: u32,
    pub name: String,
    pub count: u64,
    pub bytes: u64,
}

/// One module Inductor generated: `lines[i]` is the first line of its
/// `call` that computes what was traced from `frames[i]` (a source stack,
/// innermost first; empty where nothing is known), up to `lines[i + 1]`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct GeneratedCode {
    pub file: String,
    pub lines: Vec<u32>,
    /// `(file, line, function)` per frame.
    pub frames: Vec<Vec<(String, u32, String)>>,
}

/// One module of a model the recording ran: its path with repeated blocks
/// grouped (`model.layers[*].mlp`; `""` for the outermost module), its
/// class, the lines of its `forward`, and the module that calls it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ModuleCode {
    pub path: String,
    pub class: String,
    /// The nearest ancestor that is called (containers such as
    /// `ModuleList` skipped); `None` for the outermost module.
    pub caller: Option<String>,
    pub file: String,
    pub first_line: u32,
    pub last_line: u32,
}

/// The parameters one module owns (its own, not its children's), summed
/// over a repeated block's copies: `path` grouped as [`ModuleCode`]'s
/// (`model.layers[*].mlp`), `copies` of it, and of their `bytes` those
/// that train (`requires_grad`). A parameter two modules share (a tied
/// embedding and output layer) is counted once, for the first.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ParameterGroup {
    pub path: String,
    pub copies: u32,
    pub tensors: u32,
    pub bytes: u64,
    pub trainable_bytes: u64,
}

/// The recording's history: its limit, and how many of the recording's
/// events it saw and kept.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct History {
    /// What `max` counts: `events` (allocations and frees: vramscope's CPU
    /// and dispatch recorders) or `entries` (trace entries: PyTorch's own
    /// history on CUDA and XPU).
    pub unit: String,
    /// The most it keeps (`record(max_entries=...)`).
    pub max: u64,
    /// Events the recording saw, kept or not (`None`: not known).
    pub seen: Option<u64>,
    /// Events the trace holds (`None`: the trace's length tells).
    pub kept: Option<u64>,
}

/// What a PyTorch file leaves out about its device: how much memory it has,
/// how much the driver said was free, the memory fraction, and the
/// settings that size library workspaces.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct DeviceFacts {
    /// `cuda` or `xpu`.
    pub device_type: String,
    pub index: u32,
    /// `NVIDIA H200`.
    pub name: Option<String>,
    /// The device's memory, bytes (`mem_get_info`'s total).
    pub total_memory: Option<u64>,
    /// CUDA compute capability (major, minor).
    pub capability: Option<(u32, u32)>,
    /// Free device memory and this allocator's reserved bytes when the
    /// file was written.
    pub free_at_dump: Option<u64>,
    pub reserved_at_dump: Option<u64>,
    /// `torch.cuda.set_per_process_memory_fraction`'s value (1.0: none set).
    pub memory_fraction: Option<f64>,
    /// Environment settings that change the allocator or the workspaces
    /// (`CUBLAS_WORKSPACE_CONFIG`, `CUBLASLT_WORKSPACE_SIZE`,
    /// `PYTORCH_CUDA_ALLOC_CONF`).
    pub env: Vec<(String, String)>,
    /// What NVML said of the device at the dump (`nvidia-ml-py`).
    pub nvml: Option<NvmlUsage>,
    /// PyTorch's pinned host memory at the dump
    /// (`torch.cuda.memory.host_memory_stats()`).
    pub host_pinned: Option<HostPinned>,
}

/// The device's memory as NVML (the driver's management library, what
/// `nvidia-smi` shows) reported it when the file was written.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct NvmlUsage {
    /// Used and total memory of the whole device.
    pub device_used: Option<u64>,
    pub device_total: Option<u64>,
    /// This process's memory on the device (`None`: NVML did not list it,
    /// or gave no figure).
    pub process_used: Option<u64>,
    /// Every listed compute process's memory, this one included, and how
    /// many processes NVML listed.
    pub listed_used: Option<u64>,
    pub processes: Option<u64>,
    /// Why a figure is missing, in the recorder's words (NVML not
    /// installed, this process not listed, ...).
    pub missing: Option<String>,
}

/// PyTorch's caching host allocator (pinned host memory) at the dump.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HostPinned {
    /// Pinned blocks the allocator holds (in use and cached), bytes.
    pub allocated_bytes: u64,
    /// Of those, checked out to tensors.
    pub active_bytes: u64,
}

/// Which recorder wrote a file: the one place its name (the `recorder`
/// key) is read. Every crate asks this, never the name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RecorderKind {
    /// PyTorch's own history on CUDA (`cuda-allocator-history`).
    CudaHistory,
    /// PyTorch's own history on XPU (`xpu-allocator-history`).
    XpuHistory,
    /// c10's CPU allocator hooked natively (`cpu-allocator`).
    CpuAllocator,
    /// Every tensor storage at the dispatcher, any device (`dispatch`).
    Dispatch,
    /// The profiler's memory events (`cpu-profiler`).
    CpuProfiler,
    /// `vramscope.estimate`'s trace of what CUDA would be asked for
    /// (`estimate-meta-trace`), not a recording.
    Estimate,
    /// A name this version does not know (a newer recorder's).
    Other,
}

impl RecorderKind {
    /// The kind a `recorder` name stands for.
    pub fn of(name: &str) -> RecorderKind {
        match name {
            "cuda-allocator-history" => RecorderKind::CudaHistory,
            "xpu-allocator-history" => RecorderKind::XpuHistory,
            "cpu-allocator" => RecorderKind::CpuAllocator,
            "dispatch" => RecorderKind::Dispatch,
            "cpu-profiler" => RecorderKind::CpuProfiler,
            "estimate-meta-trace" => RecorderKind::Estimate,
            _ => RecorderKind::Other,
        }
    }
}

impl RecorderInfo {
    /// Which recorder wrote the file.
    pub fn kind(&self) -> RecorderKind {
        RecorderKind::of(&self.name)
    }

    /// Written by `vramscope.estimate` (a trace of what CUDA would be
    /// asked for), not recorded from a running program.
    pub fn is_estimate(&self) -> bool {
        self.kind() == RecorderKind::Estimate
    }

    /// The type of device whose memory the file holds: `cuda`, `xpu`,
    /// `cpu`, or the device a dispatch recording followed (`mps`). An
    /// estimate is of CUDA; an unknown recorder is taken as PyTorch's CUDA
    /// history, as a file without the key is.
    pub fn device_kind(&self) -> &str {
        match self.kind() {
            RecorderKind::CpuAllocator | RecorderKind::CpuProfiler => "cpu",
            RecorderKind::Dispatch => self.device_type.as_deref().unwrap_or("cpu"),
            RecorderKind::XpuHistory => "xpu",
            RecorderKind::CudaHistory | RecorderKind::Estimate | RecorderKind::Other => "cuda",
        }
    }

    /// Whether a caching allocator served the memory (PyTorch's histories,
    /// an estimate's CUDA), or each tensor was its own allocation
    /// (vramscope's CPU and dispatch recorders).
    pub fn caching_allocator(&self) -> bool {
        !matches!(
            self.kind(),
            RecorderKind::CpuAllocator | RecorderKind::CpuProfiler | RecorderKind::Dispatch
        )
    }

    /// Whether the allocator model replays the file: PyTorch's CUDA
    /// history, or an estimate of what CUDA would be asked for.
    pub fn replays(&self) -> bool {
        matches!(
            self.kind(),
            RecorderKind::CudaHistory | RecorderKind::Estimate
        )
    }

    /// The device facts, if the recorder stored them for `device`.
    pub fn device_facts(&self, device: u32) -> Option<&DeviceFacts> {
        self.device.as_ref().filter(|d| d.index == device)
    }
}

impl DeviceFacts {
    /// An environment setting, if it was set.
    pub fn env(&self, name: &str) -> Option<&str> {
        self.env
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }
}

/// One out-of-memory error as the allocator's observer reported it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct OomSeen {
    pub time_us: i64,
    pub device: Option<u32>,
    /// The request that failed, bytes.
    pub requested: Option<u64>,
    /// Free device memory when it failed (`cudaMemGetInfo`).
    pub device_free: Option<u64>,
    /// What the allocator could reserve: the device's total memory, or the
    /// memory fraction's maximum when one was set (the observer's third
    /// argument: `set_fraction ? allowed_memory_maximum : device_total`).
    pub limit: Option<u64>,
}

/// One optimizer of the program, read from the object itself: its class,
/// the settings that decide its state, and the state it holds by kind.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct OptimizerInfo {
    /// The class name (`AdamW`, `SGD`, `Adafactor`).
    pub type_name: String,
    /// The module that defines it (`torch.optim.sgd`, `transformers.optimization`).
    pub module: String,
    /// Settings that change the state (`momentum`, `amsgrad`, `betas`...),
    /// as `name=value` text, in the file's order.
    pub settings: Vec<(String, String)>,
    pub parameters: u64,
    pub parameter_bytes: u64,
    /// Parameter bytes by dtype (`float32`, `bfloat16`); empty in files of
    /// older recorders.
    pub parameter_dtypes: Vec<(String, u64)>,
    /// State kind (`exp_avg`, `momentum_buffer`), tensors, bytes.
    pub state: Vec<(String, u64, u64)>,
}

impl OptimizerInfo {
    /// All of its state, in bytes.
    pub fn state_bytes(&self) -> u64 {
        self.state.iter().map(|s| s.2).sum()
    }

    /// A setting's value as text (`"0.9"`, `"false"`), if recorded.
    pub fn setting(&self, name: &str) -> Option<&str> {
        self.settings
            .iter()
            .find(|s| s.0 == name)
            .map(|s| s.1.as_str())
    }
}

/// A named reference that keeps tensors alive: a global, a local of a
/// running function or the exception being handled, and the path from it to
/// the tensors (`losses[*]`, `model.cache[*]`, `total (autograd graph)`).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Holder {
    /// When the recorder looked (µs, the trace's clock); `i64::MAX` when the
    /// file does not say (the end of the recording).
    pub time_us: i64,
    /// `global`, `local` or `exception`.
    pub kind: String,
    /// The variable (`losses`), or the exception's type.
    pub name: String,
    /// The module file of a global, the function's file of a local.
    pub file: String,
    /// Of a local: the line its function was running.
    pub line: u32,
    /// Of a local: the function.
    pub function: String,
    /// The type of the variable's value (`list`, `Model`).
    pub type_name: String,
    /// The path's pattern: indices and keys are `[*]`.
    pub path: String,
    /// One path in full (`losses[4]`).
    pub example: String,
    pub tensors: u64,
    pub bytes: u64,
    /// Storage addresses: the addresses of the snapshot's blocks.
    pub addrs: Vec<u64>,
    /// Nodes of the autograd graph behind the tensor at `path`, when it has
    /// one (0 otherwise): a graph that grows between looks is kept across
    /// iterations.
    pub graph_nodes: u64,
}

/// The search for holders: objects visited, seconds, and whether it ended
/// before its limits.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct HolderScan {
    pub objects: u64,
    pub seconds: f64,
    pub complete: bool,
}

/// One reading of a device allocator's counters
/// (`torch.mps.current_allocated_memory()`, `driver_allocated_memory()`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DeviceCounter {
    pub time_us: i64,
    pub allocated: u64,
    pub reserved: u64,
}

impl RecorderInfo {
    /// Read from the `vramscope` dict as JSON; `None` when it has no
    /// `recorder` name.
    pub fn from_json(v: &serde_json::Value) -> Option<RecorderInfo> {
        let name = v.get("recorder")?.as_str()?.to_owned();
        let counters = v
            .get("device_counters")
            .and_then(|c| c.as_array())
            .map(|rows| {
                rows.iter()
                    .filter_map(|r| {
                        Some(DeviceCounter {
                            time_us: r.get("time_us")?.as_i64()?,
                            allocated: r.get("allocated")?.as_u64()?,
                            reserved: r.get("reserved")?.as_u64()?,
                        })
                    })
                    .collect()
            })
            .unwrap_or_default();
        Some(RecorderInfo {
            name,
            trace_form: v
                .get("trace_form")
                .and_then(|d| d.as_str())
                .map(str::to_owned),
            device_type: v
                .get("device_type")
                .and_then(|d| d.as_str())
                .map(str::to_owned),
            steps: v.get("steps").and_then(|s| s.as_u64()),
            torch: v.get("torch").and_then(|s| s.as_str()).map(str::to_owned),
            counters,
            compilations: v.get("compilations").and_then(|n| n.as_u64()),
            profiler_failures: v
                .get("profiler_failures")
                .and_then(|f| f.as_array())
                .map(|rows| {
                    rows.iter()
                        .filter_map(|r| r.as_str().map(str::to_owned))
                        .collect()
                })
                .unwrap_or_default(),
            holders: holders(v.get("holders"))
                .into_iter()
                .chain(
                    v.get("holder_samples")
                        .and_then(|s| s.as_array())
                        .into_iter()
                        .flatten()
                        .flat_map(|s| holders(Some(s))),
                )
                .collect(),
            holder_scan: v
                .get("holders")
                .filter(|h| h.is_object())
                .map(|h| HolderScan {
                    objects: h.get("objects").and_then(|n| n.as_u64()).unwrap_or(0),
                    seconds: h.get("seconds").and_then(|n| n.as_f64()).unwrap_or(0.0),
                    complete: h.get("complete").and_then(|b| b.as_bool()).unwrap_or(false),
                }),
            optimizers: v
                .get("optimizers")
                .and_then(|o| o.as_array())
                .map(|rows| rows.iter().filter_map(optimizer).collect())
                .unwrap_or_default(),
            device: v.get("device").and_then(device_facts),
            children: crate::children::children(v.get("children")),
            history: v.get("history").and_then(|h| {
                Some(History {
                    unit: h.get("unit")?.as_str()?.to_owned(),
                    max: h.get("max")?.as_u64()?,
                    seen: h.get("seen").and_then(|n| n.as_u64()),
                    kept: h.get("kept").and_then(|n| n.as_u64()),
                })
            }),
            upcasts: v
                .get("upcasts")
                .and_then(|a| a.as_array())
                .map(|rows| {
                    rows.iter()
                        .filter_map(|r| {
                            Some(Upcast {
                                file: r.get("file")?.as_str()?.to_owned(),
                                line: r.get("line")?.as_u64()? as u32,
                                name: r.get("name")?.as_str()?.to_owned(),
                                count: r.get("count")?.as_u64()?,
                                bytes: r.get("bytes")?.as_u64()?,
                            })
                        })
                        .collect()
                })
                .unwrap_or_default(),
            autocast: v
                .get("autocast")
                .and_then(|a| a.as_array())
                .map(|rows| {
                    rows.iter()
                        .filter_map(|r| r.as_str().map(str::to_owned))
                        .collect()
                })
                .unwrap_or_default(),
            generated: v
                .get("generated")
                .and_then(|m| m.as_array())
                .map(|rows| rows.iter().filter_map(generated_code).collect())
                .unwrap_or_default(),
            modules: v
                .get("modules")
                .and_then(|m| m.as_array())
                .map(|rows| rows.iter().filter_map(module_code).collect())
                .unwrap_or_default(),
            parameters: v
                .get("parameters")
                .and_then(|m| m.as_array())
                .map(|rows| rows.iter().filter_map(parameter_group).collect())
                .unwrap_or_default(),
            ooms: v
                .get("ooms")
                .and_then(|o| o.as_array())
                .map(|rows| {
                    rows.iter()
                        .map(|r| {
                            let num = |k: &str| r.get(k).and_then(|n| n.as_u64());
                            OomSeen {
                                time_us: r.get("time_us").and_then(|n| n.as_i64()).unwrap_or(0),
                                device: num("device").and_then(|d| u32::try_from(d).ok()),
                                requested: num("requested"),
                                device_free: num("device_free"),
                                // Written `allocated` by the first recorder
                                // that kept OOMs (it held the limit even then).
                                limit: num("limit").or_else(|| num("allocated")),
                            }
                        })
                        .collect()
                })
                .unwrap_or_default(),
        })
    }
}

fn generated_code(r: &serde_json::Value) -> Option<GeneratedCode> {
    let file = r.get("file")?.as_str()?.to_owned();
    let lines: Vec<u32> = r
        .get("lines")?
        .as_array()?
        .iter()
        .map(|n| n.as_u64().and_then(|n| u32::try_from(n).ok()))
        .collect::<Option<_>>()?;
    let frames: Vec<Vec<(String, u32, String)>> = r
        .get("frames")?
        .as_array()?
        .iter()
        .map(|stack| {
            stack
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|f| {
                    Some((
                        f.get("filename")?.as_str()?.to_owned(),
                        u32::try_from(f.get("line")?.as_u64()?).ok()?,
                        f.get("name")?.as_str()?.to_owned(),
                    ))
                })
                .collect()
        })
        .collect();
    // Each start needs its frames, in order: otherwise the map is damaged.
    (lines.len() == frames.len() && lines.windows(2).all(|w| w[0] <= w[1])).then_some(
        GeneratedCode {
            file,
            lines,
            frames,
        },
    )
}

fn parameter_group(r: &serde_json::Value) -> Option<ParameterGroup> {
    let num = |k: &str| r.get(k).and_then(|n| n.as_u64());
    let count = |k: &str| num(k).and_then(|n| u32::try_from(n).ok());
    let bytes = num("bytes")?;
    Some(ParameterGroup {
        path: r.get("path")?.as_str()?.to_owned(),
        copies: count("copies").unwrap_or(1).max(1),
        tensors: count("tensors").unwrap_or(0),
        bytes,
        // More than the whole is a damaged row: at most the whole.
        trainable_bytes: num("trainable_bytes").unwrap_or(bytes).min(bytes),
    })
}

fn module_code(r: &serde_json::Value) -> Option<ModuleCode> {
    let text = |k: &str| r.get(k).and_then(|t| t.as_str()).map(str::to_owned);
    let line = |k: &str| {
        r.get(k)
            .and_then(|n| n.as_u64())
            .and_then(|n| u32::try_from(n).ok())
    };
    Some(ModuleCode {
        path: text("path")?,
        class: text("class").unwrap_or_default(),
        caller: text("caller"),
        file: text("file")?,
        first_line: line("first_line")?,
        last_line: line("last_line")?,
    })
}

fn device_facts(d: &serde_json::Value) -> Option<DeviceFacts> {
    let num = |k: &str| d.get(k).and_then(|n| n.as_u64());
    let capability = d
        .get("capability")
        .and_then(|c| c.as_array())
        .and_then(|c| {
            let at = |i: usize| {
                c.get(i)
                    .and_then(|n| n.as_u64())
                    .and_then(|n| u32::try_from(n).ok())
            };
            Some((at(0)?, at(1)?))
        });
    Some(DeviceFacts {
        device_type: d
            .get("type")
            .and_then(|s| s.as_str())
            .unwrap_or("cuda")
            .to_owned(),
        index: num("index")
            .and_then(|n| u32::try_from(n).ok())
            .unwrap_or(0),
        name: d.get("name").and_then(|s| s.as_str()).map(str::to_owned),
        total_memory: num("total_memory"),
        capability,
        free_at_dump: num("free_at_dump"),
        reserved_at_dump: num("reserved_at_dump"),
        memory_fraction: d
            .get("memory_fraction")
            .and_then(|f| f.as_f64())
            .filter(|f| f.is_finite() && *f > 0.0),
        env: d
            .get("env")
            .and_then(|e| e.as_object())
            .map(|m| {
                m.iter()
                    .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_owned())))
                    .collect()
            })
            .unwrap_or_default(),
        nvml: d.get("nvml").and_then(|n| n.as_object()).map(|n| {
            let num = |k: &str| n.get(k).and_then(|v| v.as_u64());
            NvmlUsage {
                device_used: num("device_used"),
                device_total: num("device_total"),
                process_used: num("process_used"),
                listed_used: num("listed_used"),
                processes: num("processes"),
                missing: n.get("missing").and_then(|m| m.as_str()).map(str::to_owned),
            }
        }),
        host_pinned: d.get("host_pinned").and_then(|h| {
            Some(HostPinned {
                allocated_bytes: h.get("allocated_bytes")?.as_u64()?,
                active_bytes: h.get("active_bytes").and_then(|v| v.as_u64()).unwrap_or(0),
            })
        }),
    })
}

fn optimizer(r: &serde_json::Value) -> Option<OptimizerInfo> {
    let text = |k: &str| r.get(k).and_then(|s| s.as_str()).unwrap_or("").to_owned();
    let num = |k: &str| r.get(k).and_then(|n| n.as_u64()).unwrap_or(0);
    let settings = r
        .get("settings")
        .and_then(|s| s.as_object())
        .map(|m| {
            m.iter()
                .filter(|(_, v)| !v.is_null())
                .map(|(k, v)| (k.clone(), v.to_string().trim_matches('"').to_owned()))
                .collect()
        })
        .unwrap_or_default();
    let state = r
        .get("state")
        .and_then(|s| s.as_object())
        .map(|m| {
            m.iter()
                .map(|(k, v)| {
                    let at = |i: usize| v.get(i).and_then(|n| n.as_u64()).unwrap_or(0);
                    (k.clone(), at(0), at(1))
                })
                .collect()
        })
        .unwrap_or_default();
    Some(OptimizerInfo {
        type_name: r.get("type")?.as_str()?.to_owned(),
        module: text("module"),
        settings,
        parameters: num("parameters"),
        parameter_bytes: num("parameter_bytes"),
        parameter_dtypes: r
            .get("parameter_dtypes")
            .and_then(|s| s.as_object())
            .map(|m| {
                m.iter()
                    .map(|(k, v)| (k.clone(), v.as_u64().unwrap_or(0)))
                    .collect()
            })
            .unwrap_or_default(),
        state,
    })
}

fn holders(v: Option<&serde_json::Value>) -> Vec<Holder> {
    let Some(rows) = v.and_then(|h| h.get("holders")).and_then(|r| r.as_array()) else {
        return Vec::new();
    };
    let time_us = v
        .and_then(|h| h.get("time_us"))
        .and_then(|t| t.as_i64())
        .unwrap_or(i64::MAX);
    let text =
        |r: &serde_json::Value, k: &str| r.get(k).and_then(|s| s.as_str()).unwrap_or("").to_owned();
    let num = |r: &serde_json::Value, k: &str| r.get(k).and_then(|n| n.as_u64()).unwrap_or(0);
    rows.iter()
        .filter(|r| r.is_object())
        .map(|r| Holder {
            time_us,
            kind: text(r, "kind"),
            name: text(r, "name"),
            file: text(r, "file"),
            line: u32::try_from(num(r, "line")).unwrap_or(0),
            function: text(r, "function"),
            type_name: text(r, "type"),
            path: text(r, "path"),
            example: text(r, "example"),
            tensors: num(r, "tensors"),
            graph_nodes: num(r, "graph_nodes"),
            bytes: num(r, "bytes"),
            addrs: r
                .get("addrs")
                .and_then(|a| a.as_array())
                .map(|a| a.iter().filter_map(|x| x.as_u64()).collect())
                .unwrap_or_default(),
        })
        .collect()
}

#[cfg(test)]
mod kind_tests {
    use super::*;

    fn info(name: &str, device_type: Option<&str>) -> RecorderInfo {
        RecorderInfo {
            name: name.to_owned(),
            device_type: device_type.map(str::to_owned),
            ..RecorderInfo::default()
        }
    }

    #[test]
    fn each_recorder_names_its_device_and_allocator() {
        let cases = [
            (
                "cuda-allocator-history",
                None,
                RecorderKind::CudaHistory,
                "cuda",
                true,
                true,
            ),
            (
                "xpu-allocator-history",
                None,
                RecorderKind::XpuHistory,
                "xpu",
                true,
                false,
            ),
            (
                "cpu-allocator",
                Some("cpu"),
                RecorderKind::CpuAllocator,
                "cpu",
                false,
                false,
            ),
            (
                "dispatch",
                Some("mps"),
                RecorderKind::Dispatch,
                "mps",
                false,
                false,
            ),
            (
                "dispatch",
                None,
                RecorderKind::Dispatch,
                "cpu",
                false,
                false,
            ),
            (
                "cpu-profiler",
                None,
                RecorderKind::CpuProfiler,
                "cpu",
                false,
                false,
            ),
            (
                "estimate-meta-trace",
                None,
                RecorderKind::Estimate,
                "cuda",
                true,
                true,
            ),
            (
                "a-newer-recorder",
                None,
                RecorderKind::Other,
                "cuda",
                true,
                false,
            ),
        ];
        for (name, dt, kind, device, caching, replays) in cases {
            let r = info(name, dt);
            assert_eq!(r.kind(), kind, "{name}");
            assert_eq!(r.device_kind(), device, "{name}");
            assert_eq!(r.caching_allocator(), caching, "{name}");
            assert_eq!(r.replays(), replays, "{name}");
        }
    }
}
