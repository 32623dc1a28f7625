//! The key vocabulary of every dict in a snapshot. Each key string of a
//! pickle is resolved to a [`Key`] once and cached by its memo identity.

macro_rules! keys {
    ($($variant:ident = $name:literal,)*) => {
        #[derive(Clone, Copy, Debug, PartialEq, Eq)]
        #[repr(u8)]
        pub(crate) enum Key { $($variant,)* Other }

        impl Key {
            const ALL: &'static [Key] = &[$(Key::$variant,)* Key::Other];

            pub(crate) fn from_str(s: &str) -> Key {
                match s { $($name => Key::$variant,)* _ => Key::Other }
            }

            pub(crate) fn name(self) -> &'static str {
                match self { $(Key::$variant => $name,)* Key::Other => "?" }
            }
        }
    };
}

keys! {
    Action = "action",
    Addr = "addr",
    Size = "size",
    Stream = "stream",
    TimeUs = "time_us",
    Frames = "frames",
    CompileContext = "compile_context",
    UserMetadata = "user_metadata",
    Category = "category",
    DeviceFree = "device_free",
    ForwardFrames = "forward_frames",
    PoolId = "pool_id",
    Device = "device",
    Address = "address",
    TotalSize = "total_size",
    AllocatedSize = "allocated_size",
    ActiveSize = "active_size",
    RequestedSize = "requested_size",
    SegmentType = "segment_type",
    SegmentPoolId = "segment_pool_id",
    IsExpandable = "is_expandable",
    Blocks = "blocks",
    State = "state",
    History = "history",
    RealSize = "real_size",
    Filename = "filename",
    Line = "line",
    Name = "name",
    Stage = "stage",
    Segments = "segments",
    DeviceTraces = "device_traces",
    AllocatorSettings = "allocator_settings",
    ExternalAnnotations = "external_annotations",
    VramscopeTags = "vramscope_tags",
    Vramscope = "vramscope",
}

impl Key {
    /// Cache marker for a key string not resolved yet.
    pub(crate) const UNRESOLVED: u8 = u8::MAX;

    pub(crate) fn from_u8(i: u8) -> Key {
        Key::ALL.get(i as usize).copied().unwrap_or(Key::Other)
    }
}
