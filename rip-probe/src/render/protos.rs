//! The protocol buffer messages rip writes, declared with prost's derive
//! from the published schemas (field numbers and types as there; only the
//! fields rip fills, a decoder skips the others): pprof's `profile.proto`
//! and the part of Perfetto's `TracePacket` that describes tracks and
//! their events. Public so that a program (or a test) reads a file back
//! with the same definitions.

/// pprof's `perftools.profiles` messages (profile.proto), as `go tool
/// pprof`, Pyroscope and Parca read them.
pub mod pprof {
    /// A profile: sample types, samples, and the tables they index.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Profile {
        /// What each value of a sample is (type and unit, as strings).
        #[prost(message, repeated, tag = "1")]
        pub sample_type: Vec<ValueType>,
        /// The samples.
        #[prost(message, repeated, tag = "2")]
        pub sample: Vec<Sample>,
        /// The binaries the locations are in.
        #[prost(message, repeated, tag = "3")]
        pub mapping: Vec<Mapping>,
        /// Code locations.
        #[prost(message, repeated, tag = "4")]
        pub location: Vec<Location>,
        /// Functions the locations name.
        #[prost(message, repeated, tag = "5")]
        pub function: Vec<Function>,
        /// Every string, indexed by the other messages; entry 0 is "".
        #[prost(string, repeated, tag = "6")]
        pub string_table: Vec<String>,
        /// When the profile was taken (Unix ns).
        #[prost(int64, tag = "9")]
        pub time_nanos: i64,
        /// How long it covers.
        #[prost(int64, tag = "10")]
        pub duration_nanos: i64,
        /// Notes (indexes into the string table).
        #[prost(int64, repeated, tag = "13")]
        pub comment: Vec<i64>,
        /// The sample type shown by default (index into the string table).
        #[prost(int64, tag = "14")]
        pub default_sample_type: i64,
    }

    /// A value's type and unit (indexes into the string table).
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct ValueType {
        /// E.g. `offcpu`.
        #[prost(int64, tag = "1")]
        pub r#type: i64,
        /// E.g. `nanoseconds`.
        #[prost(int64, tag = "2")]
        pub unit: i64,
    }

    /// One sample: a stack (leaf first) and its values.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Sample {
        /// Location ids, the leaf first.
        #[prost(uint64, repeated, tag = "1")]
        pub location_id: Vec<u64>,
        /// One value per sample type.
        #[prost(int64, repeated, tag = "2")]
        pub value: Vec<i64>,
        /// Labels.
        #[prost(message, repeated, tag = "3")]
        pub label: Vec<Label>,
    }

    /// A label: a key with a string or a number.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Label {
        /// Key (string table index).
        #[prost(int64, tag = "1")]
        pub key: i64,
        /// String value (string table index), or 0.
        #[prost(int64, tag = "2")]
        pub str: i64,
        /// Numeric value.
        #[prost(int64, tag = "3")]
        pub num: i64,
        /// The numeric value's unit (string table index).
        #[prost(int64, tag = "4")]
        pub num_unit: i64,
    }

    /// A binary mapped into the process.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Mapping {
        /// Id, from 1.
        #[prost(uint64, tag = "1")]
        pub id: u64,
        /// First address.
        #[prost(uint64, tag = "2")]
        pub memory_start: u64,
        /// Address past the last.
        #[prost(uint64, tag = "3")]
        pub memory_limit: u64,
        /// File offset of `memory_start`.
        #[prost(uint64, tag = "4")]
        pub file_offset: u64,
        /// Path (string table index).
        #[prost(int64, tag = "5")]
        pub filename: i64,
        /// GNU build-id, hex (string table index).
        #[prost(int64, tag = "6")]
        pub build_id: i64,
        /// The locations in it are named.
        #[prost(bool, tag = "7")]
        pub has_functions: bool,
        /// ... with files.
        #[prost(bool, tag = "8")]
        pub has_filenames: bool,
        /// ... and lines.
        #[prost(bool, tag = "9")]
        pub has_line_numbers: bool,
        /// ... and inlined functions.
        #[prost(bool, tag = "10")]
        pub has_inline_frames: bool,
    }

    /// A code location: an address and the functions (inlined first) at it.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Location {
        /// Id, from 1.
        #[prost(uint64, tag = "1")]
        pub id: u64,
        /// Its mapping (0: none).
        #[prost(uint64, tag = "2")]
        pub mapping_id: u64,
        /// The address in the process.
        #[prost(uint64, tag = "3")]
        pub address: u64,
        /// The functions at it, the innermost inlined one first.
        #[prost(message, repeated, tag = "4")]
        pub line: Vec<Line>,
    }

    /// A function and line at a location.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Line {
        /// Function id.
        #[prost(uint64, tag = "1")]
        pub function_id: u64,
        /// Source line (0: unknown).
        #[prost(int64, tag = "2")]
        pub line: i64,
        /// Source column (0: unknown).
        #[prost(int64, tag = "3")]
        pub column: i64,
    }

    /// A function.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Function {
        /// Id, from 1.
        #[prost(uint64, tag = "1")]
        pub id: u64,
        /// Name, demangled (string table index).
        #[prost(int64, tag = "2")]
        pub name: i64,
        /// Name as in the binary (string table index).
        #[prost(int64, tag = "3")]
        pub system_name: i64,
        /// Source file (string table index).
        #[prost(int64, tag = "4")]
        pub filename: i64,
        /// First line (0: unknown).
        #[prost(int64, tag = "5")]
        pub start_line: i64,
    }
}

/// Perfetto's trace messages (`perfetto.protos`), the part `rip-probe
/// record` writes: tracks for the process and each thread, slices and
/// instants on them, and the clocks their times are in, as
/// ui.perfetto.dev and trace_processor read them.
pub mod perfetto {
    /// A trace: a sequence of packets.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Trace {
        /// The packets.
        #[prost(message, repeated, tag = "1")]
        pub packet: Vec<TracePacket>,
    }

    /// One packet: a clock snapshot, a track's description or an event.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct TracePacket {
        /// Clocks read together, to relate the trace's clock to the others.
        #[prost(message, optional, tag = "6")]
        pub clock_snapshot: Option<ClockSnapshot>,
        /// When (ns, in `timestamp_clock_id`'s clock).
        #[prost(uint64, optional, tag = "8")]
        pub timestamp: Option<u64>,
        /// The writer's sequence.
        #[prost(uint32, optional, tag = "10")]
        pub trusted_packet_sequence_id: Option<u32>,
        /// A slice's begin or end, or an instant.
        #[prost(message, optional, tag = "11")]
        pub track_event: Option<TrackEvent>,
        /// [`SEQ_INCREMENTAL_STATE_CLEARED`] on a sequence's first packet.
        #[prost(uint32, optional, tag = "13")]
        pub sequence_flags: Option<u32>,
        /// The clock `timestamp` is in ([`CLOCK_MONOTONIC`]).
        #[prost(uint32, optional, tag = "58")]
        pub timestamp_clock_id: Option<u32>,
        /// A track's description.
        #[prost(message, optional, tag = "60")]
        pub track_descriptor: Option<TrackDescriptor>,
    }

    /// `TracePacket::sequence_flags`: the sequence starts here.
    pub const SEQ_INCREMENTAL_STATE_CLEARED: u32 = 1;
    /// Perfetto's builtin clock id of CLOCK_MONOTONIC.
    pub const CLOCK_MONOTONIC: u32 = 3;
    /// Perfetto's builtin clock id of CLOCK_BOOTTIME (its default).
    pub const CLOCK_BOOTTIME: u32 = 6;

    /// Clocks read at one moment.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct ClockSnapshot {
        /// The clocks.
        #[prost(message, repeated, tag = "1")]
        pub clocks: Vec<Clock>,
        /// The clock the trace's times are shown in.
        #[prost(uint32, optional, tag = "2")]
        pub primary_trace_clock: Option<u32>,
    }

    /// One clock's reading.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Clock {
        /// The builtin clock id.
        #[prost(uint32, optional, tag = "1")]
        pub clock_id: Option<u32>,
        /// Its time (ns).
        #[prost(uint64, optional, tag = "2")]
        pub timestamp: Option<u64>,
    }

    /// A track: a process's, a thread's, or one under them.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct TrackDescriptor {
        /// The id events name it by.
        #[prost(uint64, optional, tag = "1")]
        pub uuid: Option<u64>,
        /// Its name.
        #[prost(string, optional, tag = "2")]
        pub name: Option<String>,
        /// The process it is.
        #[prost(message, optional, tag = "3")]
        pub process: Option<ProcessDescriptor>,
        /// The thread it is.
        #[prost(message, optional, tag = "4")]
        pub thread: Option<ThreadDescriptor>,
        /// The track it is under.
        #[prost(uint64, optional, tag = "5")]
        pub parent_uuid: Option<u64>,
    }

    /// A process.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct ProcessDescriptor {
        /// Process id.
        #[prost(int32, optional, tag = "1")]
        pub pid: Option<i32>,
        /// Its name.
        #[prost(string, optional, tag = "6")]
        pub process_name: Option<String>,
    }

    /// A thread.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct ThreadDescriptor {
        /// Its process's id.
        #[prost(int32, optional, tag = "1")]
        pub pid: Option<i32>,
        /// Thread id.
        #[prost(int32, optional, tag = "2")]
        pub tid: Option<i32>,
        /// Its name.
        #[prost(string, optional, tag = "5")]
        pub thread_name: Option<String>,
    }

    /// An event on a track.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct TrackEvent {
        /// Arguments shown with it.
        #[prost(message, repeated, tag = "4")]
        pub debug_annotations: Vec<DebugAnnotation>,
        /// [`TYPE_SLICE_BEGIN`], [`TYPE_SLICE_END`] or [`TYPE_INSTANT`].
        #[prost(int32, optional, tag = "9")]
        pub r#type: Option<i32>,
        /// The track it is on.
        #[prost(uint64, optional, tag = "11")]
        pub track_uuid: Option<u64>,
        /// Its categories.
        #[prost(string, repeated, tag = "22")]
        pub categories: Vec<String>,
        /// Its name.
        #[prost(string, optional, tag = "23")]
        pub name: Option<String>,
    }

    /// `TrackEvent::type`: a slice begins.
    pub const TYPE_SLICE_BEGIN: i32 = 1;
    /// `TrackEvent::type`: the innermost open slice ends.
    pub const TYPE_SLICE_END: i32 = 2;
    /// `TrackEvent::type`: an instant.
    pub const TYPE_INSTANT: i32 = 3;

    /// A named argument of an event.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct DebugAnnotation {
        /// Its value, a number.
        #[prost(int64, optional, tag = "4")]
        pub int_value: Option<i64>,
        /// Its value, a string.
        #[prost(string, optional, tag = "6")]
        pub string_value: Option<String>,
        /// Its name.
        #[prost(string, optional, tag = "10")]
        pub name: Option<String>,
    }
}
