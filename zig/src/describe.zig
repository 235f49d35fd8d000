//! Import validation: reads a managed tensor of either generation, checks every field before any
//! byte of tensor data is touched, and writes a flat `Description` the JS side reads in one go.

const std = @import("std");
const dlpack = @import("dlpack.zig");
const cuda = @import("cuda.zig");
const mappings = @import("mappings.zig");
const exports = @import("exports.zig");

const MAX_RANK = dlpack.MAX_RANK;

/// Status codes crossing the ABI. The TS side maps each to a `DLPackError` code.
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
    /// (14-16 are the Python bridge's statuses.)
    bad_address = 17,
    /// A CUDA, CUDAHost or CUDAManaged claim the driver's pointer attributes contradict (cuda.zig).
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
    _,
};

/// `detail_limit` of a `bad_deleter` refusal: why the struct may not be what the caller said.
pub const HINT_NONE: i64 = 0;
/// Passed as legacy, but version 1.x sits at offset 0 and code in the versioned deleter slot.
pub const HINT_LOOKS_VERSIONED: i64 = 1;
/// Passed as versioned, but code sits in the legacy deleter slot.
pub const HINT_LOOKS_LEGACY: i64 = 2;
/// This library's export deleter in a struct that is not one of its exports (a copy).
pub const HINT_COPIED_EXPORT: i64 = 3;

/// `detail_dim` of a `shape` or `strides` refusal whose array is not in readable memory.
pub const DIM_UNREADABLE: i32 = -3;

/// Nothing is ever mapped here (Linux mmap_min_addr, macOS __PAGEZERO, Windows' 64 KiB).
pub const FIRST_VALID_ADDRESS: usize = 4096;
/// User space ends below 2^56 on every current 64-bit OS (x86-64 LA57, AArch64, RISC-V Sv57).
pub const ADDRESS_LIMIT: usize = 1 << 56;

/// Whether `address` could hold a `T`: aligned for it and inside user space. A producer that
/// passes anything else would make the first read fault (or, misaligned, panic) in the host.
pub fn plausible(comptime T: type, address: usize) bool {
    return address % @alignOf(T) == 0 and address >= FIRST_VALID_ADDRESS and address < ADDRESS_LIMIT - @sizeOf(T);
}

/// Views never exceed 2^53 elements or bytes: JS numbers index exactly up to there. Addresses
/// cross the ABI as f64 for the same reason (and because f64 arguments take every runtime's fast
/// FFI path), so they too are exact below 2^53.
pub const MAX_EXACT: u64 = 1 << 53;
pub const MAX_EXACT_F: f64 = @floatFromInt(MAX_EXACT);

/// An address the TS side passed as an f64: null unless it is an exact integer in [0, 2^53).
pub fn addressFromF64(value: f64) ?usize {
    if (!(value >= 0 and value < MAX_EXACT_F) or @floor(value) != value) return null;
    return @intFromFloat(value);
}

pub const LAYOUT_C: u32 = 1;
pub const LAYOUT_F: u32 = 2;
/// The contiguity bits of `Description.layout`; higher bits say what is known about the memory
/// (`cuda.DEVICE_VERIFIED`).
pub const LAYOUT_MASK: u32 = LAYOUT_C | LAYOUT_F;

/// What the JS side learns about a tensor. Written into a caller-owned buffer; the 32-bit words
/// come first, then 64-bit integers (error details only), then f64 values (exact below 2^53).
pub const Description = extern struct {
    status: i32,
    /// The dimension a refusal concerns, or -1.
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
    shape: [MAX_RANK]f64,
    strides: [MAX_RANK]f64,

    pub fn setAddress(self: *Description, value: u64) void {
        self.address_lo = @truncate(value);
        self.address_hi = @truncate(value >> 32);
    }

    pub fn setOwner(self: *Description, value: usize) void {
        self.owner_lo = @truncate(value);
        self.owner_hi = @truncate(@as(u64, value) >> 32);
    }

    fn refuse(self: *Description, status: Status, dim: i32, found: i64, limit: i64) Status {
        self.status = @intFromEnum(status);
        self.detail_dim = dim;
        self.detail_found = found;
        self.detail_limit = limit;
        return status;
    }
};

comptime {
    // The TS reader hard-codes these offsets (src/description.ts).
    std.debug.assert(@offsetOf(Description, "detail_found") == 64);
    std.debug.assert(@offsetOf(Description, "byte_offset") == 80);
    std.debug.assert(@offsetOf(Description, "shape") == 120);
    std.debug.assert(@offsetOf(Description, "strides") == 120 + 8 * MAX_RANK);
    std.debug.assert(@sizeOf(Description) == 120 + 16 * MAX_RANK);
}

pub const Options = struct {
    versioned: bool,
    /// `fromDLPack`: a non-zero byte_offset is refused.
    strict_offset: bool = false,
};

/// Validates `managed` and fills `out`. Never calls a deleter: ownership decisions belong to the
/// caller, which knows whether a refusal must release the producer (raw import) or leave it to a
/// capsule destructor (Python). An accepted tensor's device claim is then checked (cuda.zig):
/// CPU memory is marked verified, a CUDA-family claim is checked against the driver when one is
/// available, and refused when the driver contradicts it.
pub fn describe(managed: usize, options: Options, out: *Description) Status {
    var own: ?exports.Own = null;
    return describeAndRecognize(managed, options, out, &own);
}

/// `describe`, also saying whether the struct is one of this library's exports (`own`, set when
/// the struct could be read), so that an import need not look again.
pub fn describeAndRecognize(managed: usize, options: Options, out: *Description, own: *?exports.Own) Status {
    const status = describeFields(managed, options, out, own);
    if (status != .ok) return status;
    return cuda.checkImport(out);
}

fn describeFields(managed: usize, options: Options, out: *Description, own: *?exports.Own) Status {
    out.status = 0;
    out.detail_dim = -1;
    out.detail_found = 0;
    out.detail_limit = 0;
    out.version_major = -1;
    out.version_minor = -1;
    out.flags = 0;
    if (managed == 0) return out.refuse(.null_managed, -1, 0, 0);
    if (!plausible(dlpack.ManagedTensorVersioned, managed)) return out.refuse(.bad_address, -1, @bitCast(@as(u64, managed)), 0);
    // The mapping holding the struct: arrays inside it need no lookup of their own.
    var span: mappings.Span = .{};
    if (checkHeader(managed, options.versioned, out, &span, own)) |refused| return refused;

    var tensor: *const dlpack.Tensor = undefined;
    if (options.versioned) {
        const m: *const dlpack.ManagedTensorVersioned = @ptrFromInt(managed);
        // A foreign major may lay out everything after `flags` differently: read nothing more.
        if (m.version.major != dlpack.VERSION_MAJOR) {
            return out.refuse(.version, -1, m.version.major, dlpack.VERSION_MAJOR);
        }
        out.version_major = @intCast(m.version.major);
        out.version_minor = @intCast(@min(m.version.minor, std.math.maxInt(i32)));
        if (m.flags & ~dlpack.FLAGS_KNOWN != 0) {
            return out.refuse(.flags, -1, @bitCast(m.flags), @bitCast(dlpack.FLAGS_KNOWN));
        }
        out.flags = @truncate(m.flags);
        tensor = &m.dl_tensor;
    } else {
        const m: *const dlpack.ManagedTensor = @ptrFromInt(managed);
        tensor = &m.dl_tensor;
    }
    return describeTensor(tensor, options, out, span);
}

fn asI64(address: usize) i64 {
    return @bitCast(@as(u64, address));
}

fn wordAt(address: usize) usize {
    return @as(*const usize, @ptrFromInt(address)).*;
}

/// Where the deleter sits in each generation's struct.
pub fn deleterOffset(versioned: bool) usize {
    return if (versioned) @offsetOf(dlpack.ManagedTensorVersioned, "deleter") else @offsetOf(dlpack.ManagedTensor, "deleter");
}

/// The checks before any field is read: the struct lies in readable memory; it is not one of this
/// library's exports in a state or of a generation it cannot be imported as; and its deleter, if
/// it has one, is executable code, so that no refusal (and no release) ever calls anything else.
fn checkHeader(managed: usize, versioned: bool, out: *Description, span: *mappings.Span, found: *?exports.Own) ?Status {
    const size: usize = if (versioned) @sizeOf(dlpack.ManagedTensorVersioned) else @sizeOf(dlpack.ManagedTensor);
    if (!mappings.readableSpan(managed, size, span)) return out.refuse(.unmapped_struct, -1, asI64(managed), @intCast(size));
    found.* = exports.recognize(managed);
    if (found.*) |own| {
        const real: i64 = @intFromBool(own.versioned);
        return switch (own.state) {
            .released => out.refuse(.released_export, -1, asI64(managed), real),
            .taken => out.refuse(.already_imported, -1, asI64(managed), real),
            .live => if (own.versioned != versioned) out.refuse(.generation, -1, asI64(managed), real) else null,
        };
    }
    const deleter = wordAt(managed + deleterOffset(versioned));
    if (deleter == 0) return null;
    if (exports.isExportDeleter(deleter)) return out.refuse(.bad_deleter, -1, asI64(deleter), HINT_COPIED_EXPORT);
    if (!mappings.executable(deleter)) {
        return out.refuse(.bad_deleter, -1, asI64(deleter), generationHint(managed, versioned));
    }
    return null;
}

/// For the message of a deleter that is not code: whether the struct looks like the other
/// generation (code in that generation's deleter slot). Both slots lie in the checked bytes.
fn generationHint(managed: usize, versioned: bool) i64 {
    const other = wordAt(managed + deleterOffset(!versioned));
    if (other == 0 or !mappings.executable(other)) return HINT_NONE;
    if (versioned) return HINT_LOOKS_LEGACY;
    const major = @as(*const u32, @ptrFromInt(managed)).*;
    return if (major == dlpack.VERSION_MAJOR) HINT_LOOKS_VERSIONED else HINT_NONE;
}

/// The shape and strides arrays must be able to hold `ndim` int64 values and lie in readable
/// memory before either is read.
fn checkArrays(t: *const dlpack.Tensor, ndim: usize, out: *Description, span: mappings.Span) ?Status {
    if (ndim == 0) return null;
    const bytes = ndim * @sizeOf(i64);
    const shape = @intFromPtr(t.shape orelse return out.refuse(.shape, -1, 0, 0));
    if (!plausible(i64, shape)) return out.refuse(.shape, -2, asI64(shape), 0);
    if (!span.contains(shape, bytes) and !mappings.readable(shape, bytes)) {
        return out.refuse(.shape, DIM_UNREADABLE, asI64(shape), @intCast(bytes));
    }
    const strides = @intFromPtr(t.strides orelse return null);
    if (!plausible(i64, strides)) return out.refuse(.strides, -2, asI64(strides), 0);
    if (!span.contains(strides, bytes) and !mappings.readable(strides, bytes)) {
        return out.refuse(.strides, DIM_UNREADABLE, asI64(strides), @intCast(bytes));
    }
    return null;
}

fn describeTensor(t: *const dlpack.Tensor, options: Options, out: *Description, span: mappings.Span) Status {
    out.dtype_code = t.dtype.code;
    out.dtype_bits = t.dtype.bits;
    out.dtype_lanes = t.dtype.lanes;
    out.device_type = t.device.device_type;
    out.device_id = t.device.device_id;
    out.ndim = t.ndim;

    if (t.ndim < 0 or t.ndim > MAX_RANK) return out.refuse(.rank, -1, t.ndim, MAX_RANK);
    const ndim: usize = @intCast(t.ndim);
    if (!t.dtype.isSupported()) return out.refuse(.dtype, -1, t.dtype.code, 0);
    if (!dlpack.DeviceType.isKnown(t.device.device_type)) {
        return out.refuse(.device, -1, t.device.device_type, 0);
    }
    if (t.device.device_id < 0) return out.refuse(.device, -1, t.device.device_id, 0);
    if (checkArrays(t, ndim, out, span)) |refused| return refused;

    // Each extent and stride is read exactly once, straight into the description, so a producer
    // that mutates its arrays concurrently cannot make the checks and the description disagree.
    // (No local [MAX_RANK] copies: safe builds fill undefined locals, which would dominate.)
    var size: u64 = 1;
    var size_overflowed = false;
    var empty = false;
    var too_large: ?usize = null;
    for (0..ndim) |d| {
        const extent = t.shape.?[d];
        if (extent < 0) return out.refuse(.shape, @intCast(d), extent, 0);
        // Even in an empty tensor, an extent the description cannot carry exactly would reach JS
        // rounded (and could not be exported again). Refused after the loop: a negative extent
        // anywhere is the first thing to report.
        if (extent > MAX_EXACT and too_large == null) too_large = d;
        out.shape[d] = @floatFromInt(extent);
        if (extent == 0) empty = true;
        const product = @mulWithOverflow(size, @as(u64, @intCast(extent)));
        if (product[1] != 0) size_overflowed = true;
        size = product[0];
    }
    if (too_large) |d| return out.refuse(.overflow, @intCast(d), t.shape.?[d], @intCast(MAX_EXACT));
    // A zero extent anywhere makes the count 0 even if a partial product overflowed.
    if (empty) size = 0 else if (size_overflowed or size > MAX_EXACT) {
        return out.refuse(.overflow, -1, 0, @intCast(MAX_EXACT));
    }
    // From here on, in a non-empty tensor every extent is at most 2^53: exact as f64.

    // Element offsets reachable from element 0, exact in i128 whatever the producer sent.
    var min_offset: i128 = 0;
    var max_offset: i128 = 0;
    if (t.strides) |given| {
        for (0..ndim) |d| {
            const stride = given[d];
            // Strides of extent-1 or empty dims never address memory and may be anything; clamp
            // what cannot be an exact f64 rather than report a rounded value that looks meaningful.
            out.strides[d] = @floatFromInt(std.math.clamp(stride, -@as(i64, MAX_EXACT), @as(i64, MAX_EXACT)));
            if (!empty) {
                const reach = @as(i128, @as(i64, @intFromFloat(out.shape[d])) - 1) * stride;
                if (reach < 0) min_offset += reach else max_offset += reach;
            }
        }
    } else {
        // NULL strides mean C order (pre-1.2 producers, 0-d tensors). Strides of an empty tensor
        // address nothing; they are computed with the extents clamped to 2^53.
        var step: f64 = 1;
        var d = ndim;
        while (d > 0) {
            d -= 1;
            out.strides[d] = step;
            step = @min(step * @min(out.shape[d], MAX_EXACT_F), MAX_EXACT_F);
        }
        if (!empty) max_offset = @as(i128, size) - 1;
    }

    const bits: u64 = t.dtype.bits;
    const padded = out.flags & dlpack.FLAG_IS_SUBBYTE_TYPE_PADDED != 0;
    // Bits per element slot in memory: sub-byte types are packed unless the producer padded them.
    const slot_bits: u64 = if (bits < 8 and padded) 8 else bits;
    const nbytes_bits = @as(u128, size) * slot_bits;
    const nbytes: u64 = @intCast((nbytes_bits + 7) / 8);

    // Span in bytes relative to element 0, and the absolute address range it covers.
    const lo_bits = min_offset * slot_bits;
    const hi_bits = (max_offset + 1) * slot_bits;
    const lo_bytes: i128 = @divFloor(lo_bits, 8);
    const hi_bytes: i128 = @divFloor(hi_bits + 7, 8);
    // Element offsets are limited too, not only bytes: packed sub-byte elements fit twice as many
    // offsets into a byte span, and the description carries them as exact f64s.
    if (!empty and (hi_bytes - lo_bytes > MAX_EXACT or -lo_bytes > MAX_EXACT or hi_bytes > MAX_EXACT or
        -min_offset > MAX_EXACT or max_offset > MAX_EXACT))
    {
        return out.refuse(.overflow, -1, 0, @intCast(MAX_EXACT));
    }

    const data: u64 = @intFromPtr(t.data);
    if (data == 0 and size != 0) return out.refuse(.null_data, -1, @intCast(size), 0);
    if (options.strict_offset and t.byte_offset != 0) {
        return out.refuse(.byte_offset, -1, @bitCast(t.byte_offset), 0);
    }
    const address_sum = @addWithOverflow(data, t.byte_offset);
    if (address_sum[1] != 0) return out.refuse(.overflow, -1, @bitCast(t.byte_offset), 0);
    const address = address_sum[0];
    if (!empty) {
        const first = @as(i128, address) + lo_bytes;
        const end = @as(i128, address) + hi_bytes;
        if (first < 0 or end > std.math.maxInt(u64)) return out.refuse(.overflow, -1, 0, 0);
    }

    out.setAddress(address);
    out.byte_offset = @floatFromInt(t.byte_offset);
    out.size = @floatFromInt(size);
    out.nbytes = @floatFromInt(nbytes);
    // Both fit in i64 (checked against 2^53 above): no slow i128 -> f64 conversion.
    out.min_offset = @floatFromInt(@as(i64, @intCast(if (empty) 0 else min_offset)));
    out.max_offset = @floatFromInt(@as(i64, @intCast(if (empty) 0 else max_offset)));
    out.layout = if (empty) LAYOUT_C | LAYOUT_F else layoutOf(out.shape[0..ndim], out.strides[0..ndim]);
    return .ok;
}

/// numpy's contiguity rules for a non-empty tensor: extent-1 dims carry no stride requirement.
/// Works on the description's f64 arrays, exact here (extents and relevant strides are <= 2^53).
pub fn layoutOf(shape: []const f64, strides: []const f64) u32 {
    var layout: u32 = 0;
    var expected: f64 = 1;
    var d = shape.len;
    const c_ok = while (d > 0) {
        d -= 1;
        if (shape[d] == 1) continue;
        if (strides[d] != expected) break false;
        expected *= shape[d];
    } else true;
    if (c_ok) layout |= LAYOUT_C;
    expected = 1;
    const f_ok = for (shape, strides) |extent, stride| {
        if (extent == 1) continue;
        if (stride != expected) break false;
        expected *= extent;
    } else true;
    if (f_ok) layout |= LAYOUT_F;
    return layout;
}

// ---------------------------------------------------------------------------------------------
// Tests: every acceptance and refusal rule, on hand-built structs.

const testing = std.testing;

const Fixture = struct {
    managed: dlpack.ManagedTensorVersioned,
    legacy: dlpack.ManagedTensor,
    shape: [MAX_RANK + 2]i64 = [_]i64{0} ** (MAX_RANK + 2),
    strides: [MAX_RANK + 2]i64 = [_]i64{0} ** (MAX_RANK + 2),
    data: [64]u8 align(16) = [_]u8{0} ** 64,
    out: Description = undefined,

    fn init(self: *Fixture, dtype: dlpack.DataType, shape: []const i64, strides: ?[]const i64) void {
        @memcpy(self.shape[0..shape.len], shape);
        if (strides) |s| @memcpy(self.strides[0..s.len], s);
        const tensor = dlpack.Tensor{
            .data = &self.data,
            .device = .{ .device_type = 1, .device_id = 0 },
            .ndim = @intCast(shape.len),
            .dtype = dtype,
            .shape = &self.shape,
            .strides = if (strides != null) &self.strides else null,
            .byte_offset = 0,
        };
        self.managed = .{ .version = .{ .major = 1, .minor = 3 }, .manager_ctx = null, .deleter = null, .flags = 0, .dl_tensor = tensor };
        self.legacy = .{ .dl_tensor = tensor, .manager_ctx = null, .deleter = null };
    }

    fn run(self: *Fixture) Status {
        return describe(@intFromPtr(&self.managed), .{ .versioned = true }, &self.out);
    }

    fn runLegacy(self: *Fixture) Status {
        return describe(@intFromPtr(&self.legacy), .{ .versioned = false }, &self.out);
    }
};

const f32_t = dlpack.DataType{ .code = 2, .bits = 32, .lanes = 1 };

test "C-contiguous float32 with NULL strides" {
    var f: Fixture = undefined;
    f.init(f32_t, &.{ 2, 3 }, null);
    try testing.expectEqual(Status.ok, f.run());
    try testing.expectEqual(@as(f64, 3), f.out.strides[0]);
    try testing.expectEqual(@as(f64, 1), f.out.strides[1]);
    try testing.expectEqual(@as(f64, 6), f.out.size);
    try testing.expectEqual(@as(f64, 24), f.out.nbytes);
    try testing.expectEqual(LAYOUT_C, f.out.layout & LAYOUT_C);
    try testing.expectEqual(@as(i32, 1), f.out.version_major);
    try testing.expectEqual(@as(i32, 3), f.out.version_minor);
}

test "legacy struct reports no version" {
    var f: Fixture = undefined;
    f.init(f32_t, &.{4}, &.{1});
    try testing.expectEqual(Status.ok, f.runLegacy());
    try testing.expectEqual(@as(i32, -1), f.out.version_major);
}

test "0-d tensor with NULL shape and strides" {
    var f: Fixture = undefined;
    f.init(f32_t, &.{}, null);
    f.managed.dl_tensor.shape = null;
    try testing.expectEqual(Status.ok, f.run());
    try testing.expectEqual(@as(f64, 1), f.out.size);
    try testing.expectEqual(@as(f64, 4), f.out.nbytes);
}

test "size-0 tensors accept NULL and non-NULL data" {
    var f: Fixture = undefined;
    f.init(f32_t, &.{ 3, 0 }, &.{ 7, 1 });
    try testing.expectEqual(Status.ok, f.run());
    try testing.expectEqual(@as(f64, 0), f.out.size);
    f.managed.dl_tensor.data = null;
    try testing.expectEqual(Status.ok, f.run());
    try testing.expectEqual(@as(u32, LAYOUT_C | LAYOUT_F), f.out.layout & LAYOUT_MASK);
}

test "negative, zero and transposed strides" {
    var f: Fixture = undefined;
    f.init(f32_t, &.{ 2, 3 }, &.{ -3, 1 });
    try testing.expectEqual(Status.ok, f.run());
    try testing.expectEqual(@as(f64, -3), f.out.min_offset);
    try testing.expectEqual(@as(f64, 2), f.out.max_offset);
    try testing.expectEqual(@as(u32, 0), f.out.layout & LAYOUT_MASK);

    f.init(f32_t, &.{ 4, 3 }, &.{ 0, 1 });
    try testing.expectEqual(Status.ok, f.run());
    try testing.expectEqual(@as(f64, 2), f.out.max_offset);

    f.init(f32_t, &.{ 2, 3 }, &.{ 1, 2 });
    try testing.expectEqual(Status.ok, f.run());
    try testing.expectEqual(LAYOUT_F, f.out.layout & LAYOUT_MASK);
}

test "size-1 dims with odd strides stay contiguous" {
    var f: Fixture = undefined;
    f.init(f32_t, &.{ 1, 3, 1 }, &.{ 12345, 1, -99 });
    try testing.expectEqual(Status.ok, f.run());
    try testing.expectEqual(LAYOUT_C, f.out.layout & LAYOUT_C);
}

test "byte_offset is folded into the address; strict mode refuses it" {
    var f: Fixture = undefined;
    f.init(f32_t, &.{2}, &.{1});
    f.managed.dl_tensor.byte_offset = 8;
    try testing.expectEqual(Status.ok, f.run());
    const address = @as(u64, f.out.address_hi) << 32 | f.out.address_lo;
    try testing.expectEqual(@intFromPtr(&f.data) + 8, address);
    try testing.expectEqual(Status.byte_offset, describe(@intFromPtr(&f.managed), .{ .versioned = true, .strict_offset = true }, &f.out));
}

test "every refusal rule" {
    var f: Fixture = undefined;
    f.init(f32_t, &.{2}, &.{1});

    try testing.expectEqual(Status.null_managed, describe(0, .{ .versioned = true }, &f.out));
    // Pointers that cannot be a struct are refused before anything is read (a misaligned one
    // used to panic, aborting the host: importDLPack({ versioned: 4097 })).
    for ([_]usize{ 8, 4095, @intFromPtr(&f.managed) + 4, 1 << 56, std.math.maxInt(usize) - 7 }) |bad| {
        try testing.expectEqual(Status.bad_address, describe(bad, .{ .versioned = true }, &f.out));
        try testing.expectEqual(Status.bad_address, describe(bad, .{ .versioned = false }, &f.out));
    }
    f.managed.dl_tensor.shape = @ptrFromInt(16);
    try testing.expectEqual(Status.shape, f.run());
    // A misaligned array pointer, written as a producer would (no Zig cast checks it).
    @as(*usize, @ptrCast(&f.managed.dl_tensor.shape)).* = @intFromPtr(&f.shape) + 1;
    try testing.expectEqual(Status.shape, f.run());
    f.managed.dl_tensor.shape = &f.shape;
    f.managed.dl_tensor.strides = @ptrFromInt(8);
    try testing.expectEqual(Status.strides, f.run());
    f.managed.dl_tensor.strides = &f.strides;
    try testing.expectEqual(Status.ok, f.run());

    f.managed.version.major = 0;
    try testing.expectEqual(Status.version, f.run());
    f.managed.version.major = 2;
    try testing.expectEqual(Status.version, f.run());
    f.managed.version.major = 1;

    f.managed.flags = 8;
    try testing.expectEqual(Status.flags, f.run());
    f.managed.flags = dlpack.FLAGS_KNOWN;
    try testing.expectEqual(Status.ok, f.run());
    f.managed.flags = 0;

    f.managed.dl_tensor.ndim = -1;
    try testing.expectEqual(Status.rank, f.run());
    f.managed.dl_tensor.ndim = 65;
    try testing.expectEqual(Status.rank, f.run());
    f.managed.dl_tensor.ndim = 1;

    const bad_types = [_]dlpack.DataType{
        .{ .code = 99, .bits = 8, .lanes = 1 },
        .{ .code = 15, .bits = 8, .lanes = 1 },
        .{ .code = 17, .bits = 8, .lanes = 1 },
        .{ .code = 0, .bits = 7, .lanes = 1 },
        .{ .code = 2, .bits = 32, .lanes = 2 },
    };
    for (bad_types) |dt| {
        f.managed.dl_tensor.dtype = dt;
        try testing.expectEqual(Status.dtype, f.run());
    }
    f.managed.dl_tensor.dtype = f32_t;

    f.managed.dl_tensor.device.device_type = 99;
    try testing.expectEqual(Status.device, f.run());
    f.managed.dl_tensor.device.device_type = 1;

    f.shape[0] = -1;
    try testing.expectEqual(Status.shape, f.run());
    try testing.expectEqual(@as(i32, 0), f.out.detail_dim);
    f.shape[0] = 2;

    f.managed.dl_tensor.data = null;
    try testing.expectEqual(Status.null_data, f.run());
    f.managed.dl_tensor.data = &f.data;

    f.managed.dl_tensor.shape = null;
    try testing.expectEqual(Status.shape, f.run());
}

test "element count and span overflow are refused" {
    var f: Fixture = undefined;
    f.init(f32_t, &.{ 1 << 32, 1 << 32 }, &.{ 0, 0 });
    try testing.expectEqual(Status.overflow, f.run());

    f.init(f32_t, &.{ 2, 2 }, &.{ std.math.maxInt(i64), 1 });
    try testing.expectEqual(Status.overflow, f.run());

    f.init(f32_t, &.{ 2, 2 }, &.{ std.math.minInt(i64), 1 });
    try testing.expectEqual(Status.overflow, f.run());

    f.init(f32_t, &.{2}, &.{1});
    f.managed.dl_tensor.byte_offset = std.math.maxInt(u64);
    try testing.expectEqual(Status.overflow, f.run());

    // Packed float4: a stride of 2^53 + 1 elements is only 2^52 bytes, but the offset itself would
    // reach JS rounded (found by the fuzzer).
    f.init(.{ .code = 17, .bits = 4, .lanes = 1 }, &.{ 2, 2 }, &.{ 2, (1 << 53) + 1 });
    try testing.expectEqual(Status.overflow, f.run());
    f.init(.{ .code = 17, .bits = 4, .lanes = 1 }, &.{ 2, 2 }, &.{ 2, -((1 << 53) + 1) });
    try testing.expectEqual(Status.overflow, f.run());

    // A large extent next to a zero one is an empty tensor, not an overflow...
    f.init(f32_t, &.{ 1 << 53, 0 }, &.{ 1, 1 });
    try testing.expectEqual(Status.ok, f.run());
    try testing.expectEqual(@as(f64, 0), f.out.size);
    try testing.expectEqual(@as(f64, 1 << 53), f.out.shape[0]);

    // ...but an extent beyond 2^53 cannot be described exactly, even in an empty tensor (found by
    // tests/native/fuzz_validator.zig: it reached JS rounded and could not be exported again).
    f.init(f32_t, &.{ std.math.maxInt(i64), 0 }, &.{ 1, 1 });
    try testing.expectEqual(Status.overflow, f.run());
    try testing.expectEqual(@as(i32, 0), f.out.detail_dim);
    f.init(f32_t, &.{ 0, (1 << 53) + 1 }, &.{ 1, 1 });
    try testing.expectEqual(Status.overflow, f.run());
}

test "addresses passed as f64" {
    try testing.expectEqual(@as(?usize, 4096), addressFromF64(4096));
    try testing.expectEqual(@as(?usize, null), addressFromF64(-8));
    try testing.expectEqual(@as(?usize, null), addressFromF64(1.5));
    try testing.expectEqual(@as(?usize, null), addressFromF64(std.math.nan(f64)));
    try testing.expectEqual(@as(?usize, null), addressFromF64(std.math.inf(f64)));
    try testing.expectEqual(@as(?usize, null), addressFromF64(MAX_EXACT_F));
}

test "sub-byte types: packed by default, padded with the flag" {
    var f: Fixture = undefined;
    f.init(.{ .code = 17, .bits = 4, .lanes = 1 }, &.{5}, null);
    try testing.expectEqual(Status.ok, f.run());
    try testing.expectEqual(@as(f64, 3), f.out.nbytes);
    f.managed.flags = dlpack.FLAG_IS_SUBBYTE_TYPE_PADDED;
    try testing.expectEqual(Status.ok, f.run());
    try testing.expectEqual(@as(f64, 5), f.out.nbytes);
}

test "every supported dtype is accepted" {
    var f: Fixture = undefined;
    const types = [_]dlpack.DataType{
        .{ .code = 6, .bits = 8, .lanes = 1 },  .{ .code = 0, .bits = 8, .lanes = 1 },
        .{ .code = 0, .bits = 16, .lanes = 1 }, .{ .code = 0, .bits = 32, .lanes = 1 },
        .{ .code = 0, .bits = 64, .lanes = 1 }, .{ .code = 1, .bits = 8, .lanes = 1 },
        .{ .code = 1, .bits = 16, .lanes = 1 }, .{ .code = 1, .bits = 32, .lanes = 1 },
        .{ .code = 1, .bits = 64, .lanes = 1 }, .{ .code = 2, .bits = 16, .lanes = 1 },
        .{ .code = 2, .bits = 64, .lanes = 1 }, .{ .code = 4, .bits = 16, .lanes = 1 },
        .{ .code = 5, .bits = 64, .lanes = 1 }, .{ .code = 5, .bits = 128, .lanes = 1 },
        .{ .code = 16, .bits = 6, .lanes = 1 },
    };
    for (types) |dt| {
        f.init(dt, &.{2}, &.{1});
        try testing.expectEqual(Status.ok, f.run());
    }
}

test "CPU memory is verified; other claims are not without a driver check" {
    var f: Fixture = undefined;
    f.init(f32_t, &.{2}, &.{1});
    try testing.expectEqual(Status.ok, f.run());
    try testing.expect(f.out.layout & cuda.DEVICE_VERIFIED != 0);
    // ROCm memory cannot be checked by this library: accepted, never verified.
    f.managed.dl_tensor.device = .{ .device_type = 10, .device_id = 0 };
    try testing.expectEqual(Status.ok, f.run());
    try testing.expectEqual(@as(u32, 0), f.out.layout & cuda.DEVICE_VERIFIED);
}

fn testDeleter(_: *dlpack.ManagedTensorVersioned) callconv(.c) void {}
fn testLegacyDeleter(_: *dlpack.ManagedTensor) callconv(.c) void {}

test "structs and arrays outside readable memory are refused before they are read" {
    if (@import("builtin").os.tag != .linux) return error.SkipZigTest;
    const page = std.heap.page_size_min;
    const region = try mappings.freshRegion(3);
    defer std.posix.munmap(region);
    const base = @intFromPtr(region.ptr);
    try std.posix.mprotect(@alignCast(region[page .. 2 * page]), std.posix.PROT.NONE);
    std.posix.munmap(@alignCast(region[2 * page ..]));
    var f: Fixture = undefined;
    f.init(f32_t, &.{ 2, 2 }, &.{ 2, 1 });

    // A legacy struct (64 bytes) ending exactly at the PROT_NONE page is readable; the versioned
    // struct read at the same address would run 16 bytes into it.
    const last = base + page - @sizeOf(dlpack.ManagedTensor);
    @memcpy(region[page - @sizeOf(dlpack.ManagedTensor) .. page], std.mem.asBytes(&f.legacy));
    try testing.expectEqual(Status.ok, describe(last, .{ .versioned = false }, &f.out));
    try testing.expectEqual(Status.unmapped_struct, describe(last, .{ .versioned = true }, &f.out));
    try testing.expectEqual(@as(i64, @intCast(last)), f.out.detail_found);
    try testing.expectEqual(@as(i64, 80), f.out.detail_limit);
    for ([_]usize{ base + page, base + 2 * page, (1 << 47) - 4096, (1 << 47) - 64 }) |address| {
        try testing.expectEqual(Status.unmapped_struct, describe(address, .{ .versioned = true }, &f.out));
        try testing.expectEqual(Status.unmapped_struct, describe(address, .{ .versioned = false }, &f.out));
    }

    // Shape and strides arrays: inside the PROT_NONE page, unmapped, or running into them.
    for ([_]usize{ base + page, base + 2 * page, base + page - 8 }) |array| {
        @as(*usize, @ptrCast(&f.managed.dl_tensor.shape)).* = array;
        try testing.expectEqual(Status.shape, f.run());
        try testing.expectEqual(DIM_UNREADABLE, f.out.detail_dim);
        try testing.expectEqual(@as(i64, 16), f.out.detail_limit);
        f.managed.dl_tensor.shape = &f.shape;
        @as(*usize, @ptrCast(&f.managed.dl_tensor.strides)).* = array;
        try testing.expectEqual(Status.strides, f.run());
        try testing.expectEqual(DIM_UNREADABLE, f.out.detail_dim);
        f.managed.dl_tensor.strides = &f.strides;
    }
    try testing.expectEqual(Status.ok, f.run());
}

test "a deleter must be executable code; the refusal says which generation the struct looks like" {
    if (!mappings.available() or @import("builtin").os.tag != .linux) return error.SkipZigTest;
    // Data in a page of our own (valgrind maps the heap, and maybe the stack, executable).
    const region = try mappings.freshRegion(1);
    defer std.posix.munmap(region);
    const data = @intFromPtr(region.ptr);
    const arrays: [*]i64 = @ptrCast(@alignCast(region.ptr));
    arrays[0] = 2;
    arrays[1] = 1;
    var f: Fixture = undefined;
    f.init(f32_t, &.{2}, &.{1});
    f.managed.dl_tensor.shape = arrays;
    f.managed.dl_tensor.strides = arrays + 1;
    f.legacy.dl_tensor.shape = arrays;
    f.legacy.dl_tensor.strides = arrays + 1;
    f.managed.deleter = testDeleter;
    try testing.expectEqual(Status.ok, f.run());
    for ([_]usize{ data, data + 64, 0xdead0000, 1 << 63 }) |bad| {
        @as(*usize, @ptrCast(&f.managed.deleter)).* = bad;
        try testing.expectEqual(Status.bad_deleter, f.run());
        try testing.expectEqual(@as(i64, @bitCast(@as(u64, bad))), f.out.detail_found);
        try testing.expectEqual(HINT_NONE, f.out.detail_limit);
    }
    // A versioned struct read as legacy: the legacy deleter slot holds the shape pointer.
    f.managed.deleter = testDeleter;
    try testing.expectEqual(Status.bad_deleter, describe(@intFromPtr(&f.managed), .{ .versioned = false }, &f.out));
    try testing.expectEqual(@as(i64, @intCast(data)), f.out.detail_found);
    try testing.expectEqual(HINT_LOOKS_VERSIONED, f.out.detail_limit);
    // A legacy struct read as versioned: ndim and dtype sit in the versioned deleter slot.
    f.legacy.deleter = testLegacyDeleter;
    try testing.expectEqual(Status.ok, f.runLegacy());
    try testing.expectEqual(Status.bad_deleter, describe(@intFromPtr(&f.legacy), .{ .versioned = true }, &f.out));
    try testing.expectEqual(HINT_LOOKS_LEGACY, f.out.detail_limit);
}

test "this library's exports: the real generation, taken and released ones are recognised" {
    if (!mappings.available()) return error.SkipZigTest;
    var data = [_]f32{ 1, 2 };
    for ([_]bool{ true, false }) |versioned| {
        const managed = exports.create(.{
            .data = @intFromPtr(&data),
            .device = .{ .device_type = 1, .device_id = 0 },
            .dtype = f32_t,
            .shape = &.{2},
            .strides = &.{1},
            .flags = 0,
            .versioned = versioned,
            .adopt_owner = false,
            .owner = null,
        }).?;
        var out: Description = undefined;
        try testing.expectEqual(Status.ok, describe(managed, .{ .versioned = versioned }, &out));
        try testing.expectEqual(Status.generation, describe(managed, .{ .versioned = !versioned }, &out));
        try testing.expectEqual(@as(i64, @intFromBool(versioned)), out.detail_limit);

        // A copy of the struct carries this library's deleter but is not an export.
        var copy: dlpack.ManagedTensorVersioned align(16) = undefined;
        @memcpy(std.mem.asBytes(&copy)[0..64], @as([*]const u8, @ptrFromInt(managed))[0..64]);
        if (versioned) @memcpy(std.mem.asBytes(&copy)[64..80], @as([*]const u8, @ptrFromInt(managed))[64..80]);
        try testing.expectEqual(Status.bad_deleter, describe(@intFromPtr(&copy), .{ .versioned = versioned }, &out));
        try testing.expectEqual(HINT_COPIED_EXPORT, out.detail_limit);

        try testing.expect(exports.claim(managed));
        try testing.expect(!exports.claim(managed));
        try testing.expectEqual(Status.already_imported, describe(managed, .{ .versioned = versioned }, &out));
        try testing.expectEqual(Status.already_imported, describe(managed, .{ .versioned = !versioned }, &out));
        dlpack.deleteManaged(managed, versioned);
        // Quarantined, poisoned: a stale address is recognised, and a second deleter call is harmless.
        try testing.expectEqual(Status.released_export, describe(managed, .{ .versioned = versioned }, &out));
        try testing.expectEqual(Status.released_export, describe(managed, .{ .versioned = !versioned }, &out));
        dlpack.deleteManaged(managed, versioned);
    }
}
