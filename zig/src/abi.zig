//! libdlpack's own C ABI, every fact of it the TypeScript side relies on written once: the ABI
//! version, option bits, statuses, the `Description` record with its detail codes, what a journal
//! entry stands for, and how addresses cross as f64. src/facts/abi.ts is generated from these
//! declarations and dlpack.zig's (`zig build abi`; `zig build abi-check` fails while it is stale).
//! Nothing here acts.

const std = @import("std");
const assert = std.debug.assert;
const dlpack = @import("dlpack.zig");

/// Bumped whenever a symbol, a signature or a shared struct layout changes. The TS loader refuses a
/// library whose number differs from its own.
pub const version: u32 = 24;

/// The option bits of `dlpk_import`, `dlpk_describe`, `dlpk_py_consume` and `dlpk_py_from`.
pub const import_option = struct {
    pub const versioned: u32 = 1 << 0;
    /// `fromDLPack`: a non-zero byte_offset is refused.
    pub const strict_offset: u32 = 1 << 1;
    /// The caller (a Python capsule consumer) leaves a refused tensor to its capsule's destructor.
    pub const keep_on_refusal: u32 = 1 << 2;
};

/// The option bits of `dlpk_export` and `dlpk_export_buffer`.
pub const export_option = struct {
    pub const versioned: u32 = 1 << 0;
    /// The export takes over the caller's owner reference instead of adding one.
    pub const adopt_owner: u32 = 1 << 1;
};

/// The one u32 of `dlpk_export_array` that carries the dtype, the flags and the options (each FFI
/// argument costs Bun's calls about a nanosecond): the dtype code in bits 0-7, its bits in 8-15
/// (one lane), the struct's flags from `flags_shift`, `export_option` bits from `options_shift`.
pub const array_word = struct {
    pub const bits_shift: u32 = 8;
    pub const flags_shift: u32 = 16;
    pub const options_shift: u32 = 24;
};

comptime {
    assert(dlpack.flags_known >> (array_word.options_shift - array_word.flags_shift) == 0);
    assert(export_option.versioned | export_option.adopt_owner <= 0xff);
}

/// Status codes crossing the ABI (imports, exports, allocations, copies). The TS side maps each
/// to a `DLPackError` code. 14-16 are `PythonStatus` values.
pub const Status = enum(i32) {
    ok = 0,
    null_managed = 1,
    version = 2,
    flags = 3,
    rank = 4,
    dtype = 5,
    device = 6,
    shape = 7,
    overflow = 8,
    null_data = 9,
    byte_offset = 10,
    out_of_memory = 11,
    invalid_argument = 12,
    strides = 13,
    /// The managed pointer cannot be a struct: misaligned, in the never-mapped first page, or
    /// beyond any 64-bit user address space. Nothing was read and no deleter called.
    bad_address = 17,
    /// A CUDA, CUDAHost or CUDAManaged claim the driver's pointer attributes contradict.
    device_claim = 18,
    /// The CUDA driver failed while checking a claim (its error is readable per thread).
    cuda = 19,
    /// The struct (its whole size for the claimed generation) is not in readable memory: unmapped,
    /// PROT_NONE, or past the end of a mapping. Nothing was read and no deleter called.
    unmapped_struct = 20,
    /// The deleter is not executable code (or is this library's export deleter on a struct that
    /// is not one of its exports). It is never called, so the tensor is leaked.
    bad_deleter = 21,
    /// One of this library's exports passed as the other generation (`detail_limit`: 1 when it
    /// really is versioned). A raw import releases it through its real deleter.
    generation = 22,
    /// One of this library's exports that an import of this library already took.
    already_imported = 23,
    /// One of this library's exports whose deleter already ran.
    released_export = 24,
    /// The data range of a tensor in host memory (every byte its shape and strides reach) is not
    /// all in readable memory: unmapped, PROT_NONE, or past the end of a mapping (`detail_found`:
    /// its first byte, `detail_limit`: its length in bytes). Nothing of it was read.
    unmapped_data = 25,
    _,
};

/// The statuses of the Python bridge's calls beyond `Status` (`dlpk_py_consume`, `dlpk_py_from`,
/// `dlpk_py_attach_thread`). `dlpk_py_from` also returns the validator's statuses, so these stay
/// clear of `Status` (14-16 are kept free there; the others start at 40).
pub const PythonStatus = enum(i32) {
    /// The capsule's name starts with "used_": a consumer took it already.
    consumed = 14,
    /// The capsule is not named "dltensor" or "dltensor_versioned".
    capsule_name = 15,
    /// libpython is not loaded (`dlpk_py_load`).
    not_loaded = 16,
    /// The object has no `__dlpack__` but an `__array_interface__`: take the general path.
    array_interface = 40,
    /// The call into Python raised: the exception is pending.
    raised = 41,
};

/// The scalar types `dlpk_load` reads, each returned as an f64 (exact for all of them; 64-bit
/// integers are not among them: an f64 cannot hold every value).
pub const Load = enum(u32) {
    u8 = 0,
    i8 = 1,
    u16 = 2,
    i16 = 3,
    u32 = 4,
    i32 = 5,
    f32 = 6,
    f64 = 7,
};

/// Results of `dlpk_py_check_object`: whether a `PyObject*` that did not come from the bridge can
/// be dereferenced, or which part of it is not in readable memory.
pub const ObjectCheck = enum(i32) {
    ok = 0,
    /// The object's header.
    header = 1,
    /// Its type object.
    type_object = 2,
    /// A type in the chain of its metatypes.
    metatype = 3,
};

/// The option bits of `dlpk_io_map`.
pub const io_option = struct {
    /// A private copy-on-write mapping, readable and writable: a write changes this process's
    /// copy of the page, never the file.
    pub const writable: u32 = 1 << 0;
    /// The file is read into library memory (an allocation) instead of being mapped.
    pub const copy: u32 = 1 << 1;
};

/// Statuses of the file calls (`dlpk_io_*`), kept clear of `Status` and `PythonStatus`. The
/// details go to the caller's `Description`: for `os`, `detail_dim` is the call (`mapped.Call`),
/// `detail_found` the `mapped.Failure` and `detail_limit` the OS's errno.
pub const IoStatus = enum(i32) {
    ok = 0,
    /// The path is empty, holds a NUL byte, or has `mapped.path_max` bytes or more.
    bad_path = 60,
    /// A system call failed.
    os = 61,
    /// Not a regular file: `detail_found` is what it is (`mapped.Kind`).
    not_regular = 62,
    /// More bytes than the caller's limit: `detail_found` the size, `detail_limit` the limit.
    too_large = 63,
    /// No bytes at all.
    empty = 64,
    /// The size changed while the file was read: `detail_found` bytes read, `detail_limit` the
    /// size it had when it was opened.
    changed = 65,
    /// The file opened is not the one looked at just before (renamed over in between).
    replaced = 66,
    /// `detail_found`: the bytes asked for.
    out_of_memory = 67,
    /// Not on this OS.
    unsupported = 68,
    /// The writer handle is not one `dlpk_io_create` made, or was finished already.
    bad_writer = 69,
};

/// Library statuses of the CUDA calls; a positive status is the driver's CUresult.
pub const CudaStatus = enum(i32) {
    /// No usable driver (`dlpk_cuda_reason` says why).
    unavailable = -1,
    invalid_argument = -2,
    invalid_device = -3,
    /// Out of host memory.
    out_of_memory = -4,
};

/// The bits of `Description.layout`.
pub const layout = struct {
    /// C-contiguous (numpy's rules: extent-1 dims carry no stride requirement).
    pub const c: u32 = 1 << 0;
    pub const f: u32 = 1 << 1;
    pub const mask: u32 = c | f;
    /// The device claim was confirmed (host memory, or the CUDA driver agreed). Without it the
    /// view is unverified.
    pub const device_verified: u32 = 1 << 8;
    /// The data lies in memory this process cannot write (a read-only mapping): the import is
    /// read-only whatever the producer said, and READ_ONLY is set in `flags` too.
    pub const data_readonly: u32 = 1 << 9;
};

/// Values of `Description.detail_dim` that are not a dimension.
pub const detail_dim = struct {
    /// The refusal concerns no dimension.
    pub const none: i32 = -1;
    /// A `shape` or `strides` pointer that cannot point at int64 values.
    pub const bad_pointer: i32 = -2;
    /// A `shape` or `strides` array not in readable memory.
    pub const unreadable: i32 = -3;
    /// A `device_claim` refusal about the ordinal, not a byte (`detail_limit`: the device count).
    pub const claim_ordinal: i32 = -2;
};

/// `detail_limit` of a `bad_deleter` refusal: why the struct may not be what the caller said.
pub const DeleterHint = enum(i64) {
    none = 0,
    /// Passed as legacy, but version 1.x sits at offset 0 and code in the versioned deleter slot.
    looks_versioned = 1,
    /// Passed as versioned, but code sits in the legacy deleter slot.
    looks_legacy = 2,
    /// This library's export deleter in a struct that is not one of its exports (a copy).
    copied_export = 3,
};

/// `detail_limit` of a description filled through a producer's DLPack C exchange table;
/// `detail_found` then holds the producer's current work stream for CUDA-family data.
pub const exchange_mark: i64 = 0x4558; // "EX"

/// What the JS side learns about a tensor. Written into a caller-owned buffer; the 32-bit words
/// come first, then 64-bit integers (error details only), then f64 values (exact below 2^53).
pub const Description = extern struct {
    status: i32,
    /// The dimension a refusal concerns, or a `detail_dim` value.
    detail_dim: i32,
    ndim: i32,
    device_type: i32,
    device_id: i32,
    /// -1 for the legacy struct.
    version_major: i32,
    version_minor: i32,
    flags: u32,
    dtype_code: u32,
    dtype_bits: u32,
    dtype_lanes: u32,
    layout: u32,
    address_lo: u32,
    address_hi: u32,
    owner_lo: u32,
    owner_hi: u32,
    /// What was found, for the error message.
    detail_found: i64,
    /// What was allowed, for the error message.
    detail_limit: i64,
    byte_offset: f64,
    size: f64,
    nbytes: f64,
    /// Lowest and highest element offsets from element 0 (min <= 0 <= max for non-empty tensors).
    min_offset: f64,
    max_offset: f64,
    shape: [dlpack.rank_max]f64,
    strides: [dlpack.rank_max]f64,

    pub fn setAddress(self: *Description, value: u64) void {
        self.address_lo = @truncate(value);
        self.address_hi = @truncate(value >> 32);
    }

    pub fn address(self: *const Description) u64 {
        return @as(u64, self.address_hi) << 32 | self.address_lo;
    }

    pub fn setOwner(self: *Description, value: usize) void {
        self.owner_lo = @truncate(value);
        self.owner_hi = @truncate(@as(u64, value) >> 32);
    }

    /// Records a refusal and its details; returns the status.
    pub fn refuse(self: *Description, status: Status, dim: i32, found: i64, limit: i64) Status {
        assert(status != .ok);
        self.status = @intFromEnum(status);
        self.detail_dim = dim;
        self.detail_found = found;
        self.detail_limit = limit;
        return status;
    }
};

comptime {
    // src/facts/abi.ts carries these offsets to the TS reader.
    assert(@offsetOf(Description, "detail_found") == 64);
    assert(@offsetOf(Description, "byte_offset") == 80);
    assert(@offsetOf(Description, "shape") == 120);
    assert(@offsetOf(Description, "strides") == 120 + 8 * dlpack.rank_max);
    assert(@sizeOf(Description) == 120 + 16 * dlpack.rank_max);
    assert(@alignOf(Description) == 8);
}

/// What the imports write into (this thread's scratch): the `Description`, then a generation that
/// changes whenever the facts a view is built from (everything but the status, the details, the
/// byte offset and the addresses) differ from the last import's into the same record, the owner
/// record's and element 0's addresses as single f64 words, then those last facts. A caller that
/// remembers what it built for a generation compares one word.
pub const KeyedDescription = extern struct {
    description: Description,
    generation: f64,
    /// `description`'s owner record.
    owner: f64,
    /// `description`'s element 0, or -1 when no f64 holds it exactly (2^53 and up: only an
    /// empty tensor may put it there).
    address: f64,
    last: Description,
};

/// The facts of a `Description` a keyed import compares: two byte ranges (`ndim` to `layout`, and
/// `size` to `max_offset`), then `ndim` extents and strides.
pub const facts_words = .{ @offsetOf(Description, "ndim"), @offsetOf(Description, "address_lo") };
pub const facts_numbers = .{ @offsetOf(Description, "size"), @offsetOf(Description, "shape") };

comptime {
    // The generation and the addresses are read as f64 words right after the description.
    assert(@offsetOf(KeyedDescription, "generation") == @sizeOf(Description));
    assert(@offsetOf(KeyedDescription, "owner") == @sizeOf(Description) + 8);
    assert(@offsetOf(KeyedDescription, "address") == @sizeOf(Description) + 16);
    assert(@offsetOf(Description, "layout") + 4 == @offsetOf(Description, "address_lo"));
    assert(@offsetOf(Description, "max_offset") + 8 == @offsetOf(Description, "shape"));
}

// ---------------------------------------------------------------------------------------------
// Journal entries (journal.zig): one f64 per release JS owes. An owner record is its address
// (> 0); a managed struct is minus (its address times `struct_entry.scale`, plus 1 when it is
// versioned), so the sign says which release an entry stands for and nothing else is stored.

pub const struct_entry = struct {
    /// A struct's entry is `-(address * scale + versioned)`.
    pub const scale: u32 = 2;
};

/// The journal entry of an owner record.
pub fn ownerEntry(address: usize) f64 {
    assert(address != 0);
    return @floatFromInt(address);
}

/// The journal entry of a managed struct (exact below 2^52, as every user-space address is).
pub fn structEntry(address: usize, versioned: bool) f64 {
    const encoded = address * struct_entry.scale + @intFromBool(versioned);
    return -@as(f64, @floatFromInt(encoded));
}

/// What a struct's journal entry stands for.
pub const EntryStruct = struct { address: usize, versioned: bool };

/// The managed struct an entry stands for (address 0 for -0 or -1, which no caller treats as a
/// struct); null for an owner record or a fraction.
pub fn structOfEntry(entry: f64) ?EntryStruct {
    const encoded = addressFromF64(-entry) orelse return null;
    const scale = struct_entry.scale;
    return .{ .address = encoded / scale, .versioned = encoded % scale == 1 };
}

test "journal entries: owner records and structs of both generations" {
    const testing = std.testing;
    try testing.expectEqual(@as(f64, 4096), ownerEntry(4096));
    try testing.expectEqual(@as(f64, -8193), structEntry(4096, true));
    try testing.expectEqual(@as(f64, -8192), structEntry(4096, false));
    const back = structOfEntry(structEntry(0x7f00_1234_5678, true)).?;
    try testing.expectEqual(@as(usize, 0x7f00_1234_5678), back.address);
    try testing.expect(back.versioned);
    try testing.expectEqual(@as(?EntryStruct, null), structOfEntry(4096));
    try testing.expectEqual(@as(?EntryStruct, null), structOfEntry(-0.5));
}

// ---------------------------------------------------------------------------------------------
// Addresses. Views never exceed 2^53 elements or bytes: JS numbers index exactly up to there.
// Addresses cross the ABI as f64 for the same reason (and because f64 arguments take every
// runtime's fast FFI path), so they too are exact below 2^53.

pub const exact_max: u64 = 1 << 53;
pub const exact_max_float: f64 = @floatFromInt(exact_max);

/// Nothing is ever mapped below (Linux mmap_min_addr, macOS __PAGEZERO, Windows' 64 KiB).
pub const address_min: usize = 4096;
/// User space ends below 2^56 on every current 64-bit OS (x86-64 LA57, AArch64, RISC-V Sv57).
pub const address_limit: usize = 1 << 56;

/// An address the TS side passed as an f64: null unless it is an exact integer in [0, 2^53).
pub fn addressFromF64(value: f64) ?usize {
    if (!(value >= 0 and value < exact_max_float)) return null;
    return @intCast(wholeNumber(value) orelse return null);
}

/// An integral f64 the TS side wrote: null unless it is an exact integer in [-2^53, 2^53].
pub fn integerFromF64(value: f64) ?i64 {
    if (!(value >= -exact_max_float and value <= exact_max_float)) return null;
    return wholeNumber(value);
}

/// `value` (within +-2^53) as an integer, or null when it has a fraction. Truncated and converted
/// back, two instructions on every x86-64: `@floor` needs SSE4.1, and the release build, made for
/// the baseline CPU, called a routine for it on every entry that takes an address.
inline fn wholeNumber(value: f64) ?i64 {
    assert(value >= -exact_max_float and value <= exact_max_float);
    const truncated: i64 = @intFromFloat(value);
    return if (@as(f64, @floatFromInt(truncated)) == value) truncated else null;
}

/// Whether `address` could hold a `T`: aligned for it and inside user space. A producer that
/// passes anything else would make the first read fault (or, misaligned, panic) in the host.
pub fn plausible(comptime T: type, address: usize) bool {
    return address % @alignOf(T) == 0 and address >= address_min and
        address < address_limit - @sizeOf(T);
}

test "addresses passed as f64" {
    const testing = std.testing;
    try testing.expectEqual(@as(?usize, 4096), addressFromF64(4096));
    try testing.expectEqual(@as(?usize, null), addressFromF64(-8));
    try testing.expectEqual(@as(?usize, null), addressFromF64(1.5));
    try testing.expectEqual(@as(?usize, null), addressFromF64(std.math.nan(f64)));
    try testing.expectEqual(@as(?usize, null), addressFromF64(std.math.inf(f64)));
    try testing.expectEqual(@as(?usize, null), addressFromF64(exact_max_float));
    try testing.expectEqual(@as(?i64, -3), integerFromF64(-3));
    try testing.expectEqual(@as(?i64, null), integerFromF64(-exact_max_float - 2));
    try testing.expectEqual(@as(?i64, null), integerFromF64(0.5));
}
