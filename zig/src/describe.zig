//! Import validation: reads a managed tensor of either generation, checks every field before any
//! byte of tensor data is touched, and writes a flat `Description` the JS side reads in one go.
//! It only reads memory: it calls no deleter, no driver and no allocator. (Whether memory is
//! readable comes from mappings.zig, which asks the kernel about what it has not seen.) Its last
//! check is that every byte of a CPU tensor's data is readable. The device claim, and the data
//! range of other host memory, are checked next, by verify.zig; admit.zig lists the sequence.

const std = @import("std");
const assert = std.debug.assert;
const abi = @import("abi.zig");
const dlpack = @import("dlpack.zig");
const exports = @import("exports.zig");
const mappings = @import("mappings.zig");

const Description = abi.Description;
const Status = abi.Status;
const rank_max = dlpack.rank_max;
const exact_max = abi.exact_max;
const exact_max_float = abi.exact_max_float;
const detail_dim = abi.detail_dim;

pub const Options = struct {
    versioned: bool,
    /// `fromDLPack`: a non-zero byte_offset is refused.
    strict_offset: bool = false,
};

/// Validates `managed` and fills `out`. Never calls a deleter: ownership decisions belong to the
/// caller, which knows whether a refusal must release the producer (raw import) or leave it to a
/// capsule destructor (Python). Sets `own` (null on entry) when the struct could be read and is
/// one of this library's exports, so that an import need not look again.
pub fn validate(managed: usize, options: Options, out: *Description, own: *?exports.Own) Status {
    out.status = @intFromEnum(Status.ok);
    out.detail_dim = detail_dim.none;
    out.detail_found = 0;
    out.detail_limit = 0;
    out.version_major = -1;
    out.version_minor = -1;
    out.flags = 0;
    if (managed == 0) return out.refuse(.null_managed, detail_dim.none, 0, 0);
    if (!abi.plausible(dlpack.ManagedTensorVersioned, managed)) {
        return out.refuse(.bad_address, detail_dim.none, asI64(managed), 0);
    }
    // The mapping holding the struct: arrays inside it need no lookup of their own.
    var span: mappings.Span = .{};
    if (checkHeader(managed, options.versioned, out, &span, own)) |refused| return refused;
    // One call of `describeTensor`, so that it is inlined here (the import path is hot).
    var tensor: *const dlpack.Tensor = undefined;
    if (options.versioned) {
        const m: *const dlpack.ManagedTensorVersioned = @ptrFromInt(managed);
        if (checkVersion(m, out)) |refused| return refused;
        tensor = &m.dl_tensor;
    } else {
        const m: *const dlpack.ManagedTensor = @ptrFromInt(managed);
        tensor = &m.dl_tensor;
    }
    return describeTensor(tensor, options, out, span);
}

/// The version and flags of a versioned struct. A foreign major may lay out everything after
/// `flags` differently: nothing more is read then.
fn checkVersion(m: *const dlpack.ManagedTensorVersioned, out: *Description) ?Status {
    assert(out.status == @intFromEnum(Status.ok));
    const major = m.version.major;
    if (major != dlpack.version_major) {
        return out.refuse(.version, detail_dim.none, major, dlpack.version_major);
    }
    out.version_major = @intCast(major);
    out.version_minor = @intCast(@min(m.version.minor, std.math.maxInt(i32)));
    const flags = m.flags;
    if (flags & ~dlpack.flags_known != 0) {
        return out.refuse(.flags, detail_dim.none, @bitCast(flags), @bitCast(dlpack.flags_known));
    }
    out.flags = @truncate(flags);
    return null;
}

fn asI64(address: usize) i64 {
    return @bitCast(@as(u64, address));
}

fn wordAt(address: usize) usize {
    return @as(*const usize, @ptrFromInt(address)).*;
}

/// The checks before any field is read: the struct lies in readable memory; it is not one of this
/// library's exports in a state or of a generation it cannot be imported as; and its deleter, if
/// it has one, is executable code, so that no refusal (and no release) ever calls anything else.
fn checkHeader(
    managed: usize,
    versioned: bool,
    out: *Description,
    span: *mappings.Span,
    found: *?exports.Own,
) ?Status {
    const size = dlpack.managedSize(versioned);
    if (!mappings.readableSpan(managed, size, span)) {
        return out.refuse(.unmapped_struct, detail_dim.none, asI64(managed), @intCast(size));
    }
    found.* = exports.recognize(managed);
    if (found.*) |own| {
        // One refusal call: an optional built in each switch arm took a stack slot of its own.
        const status: Status = switch (own.state) {
            .released => .released_export,
            .taken => .already_imported,
            .live => if (own.versioned != versioned) .generation else return null,
        };
        return out.refuse(status, detail_dim.none, asI64(managed), @intFromBool(own.versioned));
    }
    const deleter = wordAt(managed + dlpack.deleterOffset(versioned));
    if (deleter == 0) return null;
    if (exports.isExportDeleter(deleter)) {
        const hint = @intFromEnum(abi.DeleterHint.copied_export);
        return out.refuse(.bad_deleter, detail_dim.none, asI64(deleter), hint);
    }
    if (!mappings.executable(deleter)) {
        const hint = @intFromEnum(generationHint(managed, versioned));
        return out.refuse(.bad_deleter, detail_dim.none, asI64(deleter), hint);
    }
    return null;
}

/// For the message of a deleter that is not code: whether the struct looks like the other
/// generation (code in that generation's deleter slot). Both slots lie in the checked bytes.
fn generationHint(managed: usize, versioned: bool) abi.DeleterHint {
    const other = wordAt(managed + dlpack.deleterOffset(!versioned));
    if (other == 0 or !mappings.executable(other)) return .none;
    if (versioned) return .looks_legacy;
    const major = @as(*const u32, @ptrFromInt(managed)).*;
    return if (major == dlpack.version_major) .looks_versioned else .none;
}

/// The shape and strides arrays must be able to hold `ndim` int64 values and lie in readable
/// memory before either is read.
fn checkArrays(
    arrays: Arrays,
    ndim: usize,
    out: *Description,
    span: mappings.Span,
) ?Status {
    assert(ndim <= rank_max);
    if (ndim == 0) return null;
    const bytes = ndim * @sizeOf(i64);
    const shape = @intFromPtr(arrays.shape orelse return out.refuse(.shape, detail_dim.none, 0, 0));
    if (!abi.plausible(i64, shape)) {
        return out.refuse(.shape, detail_dim.bad_pointer, asI64(shape), 0);
    }
    if (!span.contains(shape, bytes) and !mappings.readable(shape, bytes)) {
        return out.refuse(.shape, detail_dim.unreadable, asI64(shape), @intCast(bytes));
    }
    const strides = @intFromPtr(arrays.strides orelse return null);
    if (!abi.plausible(i64, strides)) {
        return out.refuse(.strides, detail_dim.bad_pointer, asI64(strides), 0);
    }
    if (!span.contains(strides, bytes) and !mappings.readable(strides, bytes)) {
        return out.refuse(.strides, detail_dim.unreadable, asI64(strides), @intCast(bytes));
    }
    return null;
}

/// Rank, dtype and device: the fields that decide whether anything else can be described.
fn checkKinds(t: *const dlpack.Tensor, out: *Description) ?Status {
    out.dtype_code = t.dtype.code;
    out.dtype_bits = t.dtype.bits;
    out.dtype_lanes = t.dtype.lanes;
    out.device_type = t.device.device_type;
    out.device_id = t.device.device_id;
    out.ndim = t.ndim;
    if (t.ndim < 0 or t.ndim > rank_max) {
        return out.refuse(.rank, detail_dim.none, t.ndim, rank_max);
    }
    if (!t.dtype.isSupported()) return out.refuse(.dtype, detail_dim.none, t.dtype.code, 0);
    if (!dlpack.DeviceType.isKnown(t.device.device_type)) {
        return out.refuse(.device, detail_dim.none, t.device.device_type, 0);
    }
    if (t.device.device_id < 0) return out.refuse(.device, detail_dim.none, t.device.device_id, 0);
    return null;
}

fn describeTensor(
    t: *const dlpack.Tensor,
    options: Options,
    out: *Description,
    span: mappings.Span,
) Status {
    if (checkKinds(t, out)) |refused| return refused;
    const ndim: usize = @intCast(t.ndim);
    // The array pointers are read once: the ones checked are the ones read through.
    const arrays: Arrays = .{ .shape = t.shape, .strides = t.strides };
    if (checkArrays(arrays, ndim, out, span)) |refused| return refused;
    // Returned by value: a struct written through a pointer and read back as one vector stalled
    // store forwarding (a fifth of the validator's time).
    var dims: Dims = undefined;
    if (arrays.strides != null) {
        switch (readDims(true, arrays, ndim, out)) {
            .refused => |refused| return refused,
            .read => |read| dims = read,
        }
    } else {
        switch (readDims(false, arrays, ndim, out)) {
            .refused => |refused| return refused,
            .read => |read| dims = defaultStrides(ndim, out, read),
        }
    }
    // From here on, in a non-empty tensor every extent is at most 2^53: exact as f64.
    assert(dims.empty or dims.size <= exact_max);
    return describeSpan(t, options, out, dims, span);
}

/// A tensor's shape and strides pointers, as read once from its struct.
const Arrays = struct {
    shape: ?[*]align(1) const i64,
    strides: ?[*]align(1) const i64,
};

/// What one pass over the extents (and strides) found: the element count, the element offsets
/// reachable from element 0 (0 in an empty tensor) and the layout bits.
const Dims = struct {
    size: u64,
    empty: bool,
    min: i64,
    max: i64,
    layout: u32,
};

const empty_dims: Dims = .{
    .size = 0,
    .empty = true,
    .min = 0,
    .max = 0,
    .layout = abi.layout.c | abi.layout.f,
};

const DimsRead = union(enum) {
    read: Dims,
    refused: Status,
};

/// The contiguity checks of a pass over the dims, first to last. Extent-1 dims carry no stride
/// requirement (numpy's rules). C order: each stride is the next non-1 dim's stride times its
/// extent, and the last one is 1. F order: each stride is the product of the extents before it.
const Contiguity = struct {
    prefix: u64 = 1,
    /// The stride of the last non-1 dim seen (0: none yet).
    last_stride: i64 = 0,
    seen: bool = false,
    c_ok: bool = true,
    f_ok: bool = true,

    fn step(self: *Contiguity, extent: i64, stride: i64) void {
        // Wrapping: a product that wraps belongs to a count the pass refuses anyway.
        defer self.prefix *%= @bitCast(extent);
        if (extent == 1) return;
        if (self.seen) {
            const next = @mulWithOverflow(stride, extent);
            self.c_ok = self.c_ok and next[1] == 0 and next[0] == self.last_stride;
        }
        self.f_ok = self.f_ok and stride == @as(i64, @bitCast(self.prefix));
        self.last_stride = stride;
        self.seen = true;
    }

    fn layout(self: Contiguity) u32 {
        const c = self.c_ok and (!self.seen or self.last_stride == 1);
        return @as(u32, if (c) abi.layout.c else 0) | @as(u32, if (self.f_ok) abi.layout.f else 0);
    }
};

/// Reads each extent (and, when `strided`, each stride) exactly once, straight into the
/// description, so a producer that mutates its arrays concurrently cannot make the checks and the
/// description disagree; the count, the reach of every dim and the layout come out of the same
/// pass. Refusals keep their order: a negative extent, an extent beyond 2^53, the count, then a
/// reach beyond 2^53 (reaches of one sign only add up, so any one too long overflows the span;
/// skipping those keeps the sums below 2^59).
fn readDims(
    comptime strided: bool,
    arrays: Arrays,
    ndim: usize,
    out: *Description,
) DimsRead {
    const limit: i64 = exact_max;
    var size: u64 = 1;
    var size_overflowed = false;
    var empty = false;
    var reach_overflowed = false;
    // The first dim whose extent is too large, or ndim.
    var too_large: usize = ndim;
    var min: i64 = 0;
    var max: i64 = 0;
    var contiguity: Contiguity = .{};
    for (0..ndim) |d| {
        const extent = arrays.shape.?[d];
        if (extent < 0) return .{ .refused = out.refuse(.shape, @intCast(d), extent, 0) };
        // Even in an empty tensor, an extent the description cannot carry exactly would reach JS
        // rounded (and could not be exported again). Refused after the loop: a negative extent
        // anywhere is the first thing to report.
        if (extent > limit) too_large = @min(too_large, d);
        out.shape[d] = @floatFromInt(extent);
        if (extent == 0) empty = true;
        const product = @mulWithOverflow(size, @as(u64, @intCast(extent)));
        if (product[1] != 0) size_overflowed = true;
        size = product[0];
        if (!strided) continue;
        const stride = arrays.strides.?[d];
        // Strides of extent-1 or empty dims never address memory and may be anything; clamp
        // what cannot be an exact f64 rather than report a rounded value that looks meaningful.
        out.strides[d] = @floatFromInt(std.math.clamp(stride, -limit, limit));
        const reach = @mulWithOverflow(extent -% 1, stride);
        if (reach[1] != 0 or reach[0] > limit or reach[0] < -limit) {
            reach_overflowed = true;
        } else if (reach[0] < 0) min += reach[0] else max += reach[0];
        contiguity.step(extent, stride);
    }
    if (too_large < ndim) {
        // Read again for the message only.
        const found = arrays.shape.?[too_large];
        return .{ .refused = out.refuse(.overflow, @intCast(too_large), found, limit) };
    }
    // A zero extent anywhere makes the count 0 even if a partial product overflowed.
    if (empty) return .{ .read = empty_dims };
    if (size_overflowed or size > exact_max or reach_overflowed) {
        return .{ .refused = out.refuse(.overflow, detail_dim.none, 0, limit) };
    }
    const layout = contiguity.layout();
    return .{ .read = .{ .size = size, .empty = false, .min = min, .max = max, .layout = layout } };
}

/// NULL strides mean C order (pre-1.2 producers, 0-d tensors). Strides of an empty tensor
/// address nothing; they are computed with the extents clamped to 2^53.
fn defaultStrides(ndim: usize, out: *Description, read: Dims) Dims {
    var dims = read;
    var step: f64 = 1;
    var d = ndim;
    while (d > 0) {
        d -= 1;
        out.strides[d] = step;
        step = @min(step * @min(out.shape[d], exact_max_float), exact_max_float);
    }
    if (dims.empty) return dims;
    dims.max = @intCast(dims.size - 1);
    dims.layout = layoutOf(out.shape[0..ndim], out.strides[0..ndim]);
    return dims;
}

/// The byte span, the data address and the layout: the last checks, then the rest of `out`.
fn describeSpan(
    t: *const dlpack.Tensor,
    options: Options,
    out: *Description,
    dims: Dims,
    span: mappings.Span,
) Status {
    const empty = dims.empty;
    const limit: i64 = exact_max;
    const bits: i64 = t.dtype.bits;
    const padded = out.flags & dlpack.flag.is_subbyte_type_padded != 0;
    // Bits per element slot in memory: sub-byte types are packed unless the producer padded them.
    const slot_bits: i64 = if (bits < 8 and padded) 8 else bits;
    // Span in bytes relative to element 0. Element offsets are limited too, not only bytes:
    // packed sub-byte elements fit twice as many offsets into a byte span, and the description
    // carries them as exact f64s. (Checked first: then the products below fit in i64.)
    var lo_bytes: i64 = 0;
    var hi_bytes: i64 = 0;
    if (!empty) {
        if (-dims.min > limit or dims.max > limit) {
            return out.refuse(.overflow, detail_dim.none, 0, limit);
        }
        lo_bytes = @divFloor(dims.min * slot_bits, 8);
        hi_bytes = @divFloor((dims.max + 1) * slot_bits + 7, 8);
        if (hi_bytes - lo_bytes > limit or -lo_bytes > limit or hi_bytes > limit) {
            return out.refuse(.overflow, detail_dim.none, 0, limit);
        }
    }
    const data: u64 = @intFromPtr(t.data);
    if (data == 0 and dims.size != 0) {
        return out.refuse(.null_data, detail_dim.none, @intCast(dims.size), 0);
    }
    if (options.strict_offset and t.byte_offset != 0) {
        return out.refuse(.byte_offset, detail_dim.none, @bitCast(t.byte_offset), 0);
    }
    const address_sum = @addWithOverflow(data, t.byte_offset);
    if (address_sum[1] != 0) {
        return out.refuse(.overflow, detail_dim.none, @bitCast(t.byte_offset), 0);
    }
    const address = address_sum[0];
    // The absolute range [address + lo_bytes, address + hi_bytes) must be addresses.
    if (!empty and (address < @as(u64, @intCast(-lo_bytes)) or
        @addWithOverflow(address, @as(u64, @intCast(hi_bytes)))[1] != 0))
    {
        return out.refuse(.overflow, detail_dim.none, 0, 0);
    }
    var layout = dims.layout;
    if (!empty and t.device.device_type == @intFromEnum(dlpack.DeviceType.cpu)) {
        const first = address - @as(u64, @intCast(-lo_bytes));
        const end = address + @as(u64, @intCast(hi_bytes));
        if (checkData(first, end, span, out, &layout)) |refused| return refused;
    }
    // Both fit in u64: size <= 2^53 and slot_bits <= 128.
    const nbytes: u64 = (dims.size * @as(u64, @intCast(slot_bits)) + 7) / 8;
    out.setAddress(address);
    out.byte_offset = @floatFromInt(t.byte_offset);
    out.size = @floatFromInt(dims.size);
    out.nbytes = @floatFromInt(nbytes);
    out.min_offset = @floatFromInt(dims.min);
    out.max_offset = @floatFromInt(dims.max);
    out.layout = layout;
    assert(out.layout & ~(abi.layout.mask | abi.layout.data_readonly) == 0);
    return .ok;
}

/// The data range of CPU memory, [first, end): every byte readable, else refused; where
/// any of it cannot be written the import is read-only (READ_ONLY set, as if the producer had).
/// The last check, and the hot path's: small tensors often lie in the mapping of their struct
/// (`span`, the heap), else a look at the data ranges remembered. (verify.zig checks other host
/// memory after its device claim.)
inline fn checkData(
    first: u64,
    end: u64,
    span: mappings.Span,
    out: *Description,
    layout: *u32,
) ?Status {
    assert(first < end);
    const writable = mappings.perm_read | mappings.perm_write;
    if (first >= span.lo and end <= span.hi and span.perms & writable == writable) return null;
    const perms = mappings.dataRangeAccess(first, end);
    if (perms == 0) {
        return out.refuse(.unmapped_data, detail_dim.none, asI64(first), @intCast(end - first));
    }
    if (perms & mappings.perm_write == 0) {
        out.flags |= @truncate(dlpack.flag.read_only);
        layout.* |= abi.layout.data_readonly;
    }
    return null;
}

/// numpy's contiguity rules for a non-empty tensor: extent-1 dims carry no stride requirement.
/// Works on the description's f64 arrays, exact here (extents and relevant strides are <= 2^53).
pub fn layoutOf(shape: []const f64, strides: []const f64) u32 {
    assert(shape.len == strides.len);
    var bits: u32 = 0;
    var expected: f64 = 1;
    var d = shape.len;
    const c_ok = while (d > 0) {
        d -= 1;
        if (shape[d] == 1) continue;
        if (strides[d] != expected) break false;
        expected *= shape[d];
    } else true;
    if (c_ok) bits |= abi.layout.c;
    expected = 1;
    const f_ok = for (shape, strides) |extent, stride| {
        if (extent == 1) continue;
        if (stride != expected) break false;
        expected *= extent;
    } else true;
    if (f_ok) bits |= abi.layout.f;
    return bits;
}

// ---------------------------------------------------------------------------------------------
// Tests: every acceptance and refusal rule, on hand-built structs.

const fresh = @import("fresh_pages.zig");
const testing = std.testing;

const Fixture = struct {
    managed: dlpack.ManagedTensorVersioned,
    legacy: dlpack.ManagedTensor,
    shape: [rank_max + 2]i64 = [_]i64{0} ** (rank_max + 2),
    strides: [rank_max + 2]i64 = [_]i64{0} ** (rank_max + 2),
    data: [64]u8 align(16) = [_]u8{0} ** 64,
    out: Description = undefined,

    fn init(
        self: *Fixture,
        dtype: dlpack.DataType,
        shape: []const i64,
        strides: ?[]const i64,
    ) void {
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
        self.managed = .{
            .version = .{ .major = 1, .minor = 3 },
            .manager_ctx = null,
            .deleter = null,
            .flags = 0,
            .dl_tensor = tensor,
        };
        self.legacy = .{ .dl_tensor = tensor, .manager_ctx = null, .deleter = null };
    }

    fn run(self: *Fixture) Status {
        return describe(@intFromPtr(&self.managed), .{ .versioned = true }, &self.out);
    }

    fn runLegacy(self: *Fixture) Status {
        return describe(@intFromPtr(&self.legacy), .{ .versioned = false }, &self.out);
    }
};

/// The validator alone, for tests that do not look at `own`.
fn describe(managed: usize, options: Options, out: *Description) Status {
    var own: ?exports.Own = null;
    return validate(managed, options, out, &own);
}

const f32_t = dlpack.DataType{ .code = 2, .bits = 32, .lanes = 1 };

/// What an import into a `KeyedDescription` (this thread's scratch) adds to the description it
/// wrote: the owner record's and element 0's addresses as f64 words, and a generation that moves
/// on, with the facts remembered, unless they equal the remembered ones.
pub fn keyFacts(keyed: *abi.KeyedDescription) void {
    const now = &keyed.description;
    const owner_record: u64 = @as(u64, now.owner_hi) << 32 | now.owner_lo;
    keyed.owner = @floatFromInt(owner_record);
    const element = now.address();
    keyed.address = if (element < abi.exact_max) @floatFromInt(element) else -1;
    assert(now.ndim >= 0 and now.ndim <= dlpack.rank_max);
    if (sameFacts(now, &keyed.last)) return;
    const rank: usize = @intCast(now.ndim);
    const now_bytes = std.mem.asBytes(now);
    const last_bytes = std.mem.asBytes(&keyed.last);
    const words_at, const words_end = abi.facts_words;
    const numbers_at, const numbers_end = abi.facts_numbers;
    @memcpy(last_bytes[words_at..words_end], now_bytes[words_at..words_end]);
    @memcpy(last_bytes[numbers_at..numbers_end], now_bytes[numbers_at..numbers_end]);
    @memcpy(keyed.last.shape[0..rank], now.shape[0..rank]);
    @memcpy(keyed.last.strides[0..rank], now.strides[0..rank]);
    keyed.generation += 1;
}

/// Whether two descriptions agree on every fact a view is built from (compared as bytes: -0 and 0
/// differ, which only costs a rebuild).
fn sameFacts(a: *const Description, b: *const Description) bool {
    if (a.ndim != b.ndim) return false;
    const rank: usize = @intCast(a.ndim);
    const a_bytes = std.mem.asBytes(a);
    const b_bytes = std.mem.asBytes(b);
    const words_at, const words_end = abi.facts_words;
    const numbers_at, const numbers_end = abi.facts_numbers;
    return std.mem.eql(u8, a_bytes[words_at..words_end], b_bytes[words_at..words_end]) and
        std.mem.eql(u8, a_bytes[numbers_at..numbers_end], b_bytes[numbers_at..numbers_end]) and
        std.mem.eql(f64, a.shape[0..rank], b.shape[0..rank]) and
        std.mem.eql(f64, a.strides[0..rank], b.strides[0..rank]);
}

test "C-contiguous float32 with NULL strides" {
    var f: Fixture = undefined;
    f.init(f32_t, &.{ 2, 3 }, null);
    try testing.expectEqual(Status.ok, f.run());
    try testing.expectEqual(@as(f64, 3), f.out.strides[0]);
    try testing.expectEqual(@as(f64, 1), f.out.strides[1]);
    try testing.expectEqual(@as(f64, 6), f.out.size);
    try testing.expectEqual(@as(f64, 24), f.out.nbytes);
    try testing.expectEqual(abi.layout.c, f.out.layout & abi.layout.c);
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
    try testing.expectEqual(@as(u32, abi.layout.c | abi.layout.f), f.out.layout & abi.layout.mask);
}

test "negative, zero and transposed strides" {
    var f: Fixture = undefined;
    f.init(f32_t, &.{ 2, 3 }, &.{ -3, 1 });
    try testing.expectEqual(Status.ok, f.run());
    try testing.expectEqual(@as(f64, -3), f.out.min_offset);
    try testing.expectEqual(@as(f64, 2), f.out.max_offset);
    try testing.expectEqual(@as(u32, 0), f.out.layout & abi.layout.mask);

    f.init(f32_t, &.{ 4, 3 }, &.{ 0, 1 });
    try testing.expectEqual(Status.ok, f.run());
    try testing.expectEqual(@as(f64, 2), f.out.max_offset);

    f.init(f32_t, &.{ 2, 3 }, &.{ 1, 2 });
    try testing.expectEqual(Status.ok, f.run());
    try testing.expectEqual(abi.layout.f, f.out.layout & abi.layout.mask);
}

test "size-1 dims with odd strides stay contiguous" {
    var f: Fixture = undefined;
    f.init(f32_t, &.{ 1, 3, 1 }, &.{ 12345, 1, -99 });
    try testing.expectEqual(Status.ok, f.run());
    try testing.expectEqual(abi.layout.c, f.out.layout & abi.layout.c);
}

test "byte_offset is folded into the address; strict mode refuses it" {
    var f: Fixture = undefined;
    f.init(f32_t, &.{2}, &.{1});
    f.managed.dl_tensor.byte_offset = 8;
    try testing.expectEqual(Status.ok, f.run());
    const address = @as(u64, f.out.address_hi) << 32 | f.out.address_lo;
    try testing.expectEqual(@intFromPtr(&f.data) + 8, address);
    try testing.expectEqual(
        Status.byte_offset,
        describe(@intFromPtr(&f.managed), .{ .versioned = true, .strict_offset = true }, &f.out),
    );
}

test "every refusal rule" {
    var f: Fixture = undefined;
    f.init(f32_t, &.{2}, &.{1});

    try testing.expectEqual(Status.null_managed, describe(0, .{ .versioned = true }, &f.out));
    // Pointers that cannot be a struct are refused before anything is read (a misaligned one
    // used to panic, aborting the host: importDLPack({ versioned: 4097 })).
    const misaligned = @intFromPtr(&f.managed) + 4;
    for ([_]usize{ 8, 4095, misaligned, 1 << 56, std.math.maxInt(usize) - 7 }) |bad| {
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
    f.managed.flags = dlpack.flags_known;
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

test "sub-byte types: packed by default, padded with the flag" {
    var f: Fixture = undefined;
    f.init(.{ .code = 17, .bits = 4, .lanes = 1 }, &.{5}, null);
    try testing.expectEqual(Status.ok, f.run());
    try testing.expectEqual(@as(f64, 3), f.out.nbytes);
    f.managed.flags = dlpack.flag.is_subbyte_type_padded;
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

fn testDeleter(_: *dlpack.ManagedTensorVersioned) callconv(.c) void {}
fn testLegacyDeleter(_: *dlpack.ManagedTensor) callconv(.c) void {}

test "structs and arrays outside readable memory are refused before they are read" {
    if (@import("builtin").os.tag != .linux) return error.SkipZigTest;
    const page = std.heap.page_size_min;
    const region = try fresh.freshRegion(3);
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
        try testing.expectEqual(
            Status.unmapped_struct,
            describe(address, .{ .versioned = true }, &f.out),
        );
        try testing.expectEqual(
            Status.unmapped_struct,
            describe(address, .{ .versioned = false }, &f.out),
        );
    }

    // Shape and strides arrays: inside the PROT_NONE page, unmapped, or running into them.
    for ([_]usize{ base + page, base + 2 * page, base + page - 8 }) |array| {
        @as(*usize, @ptrCast(&f.managed.dl_tensor.shape)).* = array;
        try testing.expectEqual(Status.shape, f.run());
        try testing.expectEqual(detail_dim.unreadable, f.out.detail_dim);
        try testing.expectEqual(@as(i64, 16), f.out.detail_limit);
        f.managed.dl_tensor.shape = &f.shape;
        @as(*usize, @ptrCast(&f.managed.dl_tensor.strides)).* = array;
        try testing.expectEqual(Status.strides, f.run());
        try testing.expectEqual(detail_dim.unreadable, f.out.detail_dim);
        f.managed.dl_tensor.strides = &f.strides;
    }
    try testing.expectEqual(Status.ok, f.run());
}

test "data outside readable memory is refused; data in read-only memory is imported read-only" {
    if (@import("builtin").os.tag != .linux or !mappings.available()) return error.SkipZigTest;
    const page = std.heap.page_size_min;
    const prot = std.posix.PROT;
    const region = try fresh.freshPages(&.{ prot.READ | prot.WRITE, prot.READ, prot.NONE });
    defer std.posix.munmap(region);
    const base = @intFromPtr(region.ptr);
    var f: Fixture = undefined;
    f.init(f32_t, &.{ 2, 2 }, &.{ 2, 1 });
    const bad = [_]usize{ 16, base + 2 * page, base + 2 * page - 8, (1 << 47) - 8, (1 << 53) - 8 };
    for (bad) |data| {
        f.managed.dl_tensor.data = @ptrFromInt(data);
        f.legacy.dl_tensor.data = @ptrFromInt(data);
        try testing.expectEqual(Status.unmapped_data, f.run());
        try testing.expectEqual(@as(i64, @intCast(data)), f.out.detail_found);
        try testing.expectEqual(@as(i64, 16), f.out.detail_limit);
        try testing.expectEqual(Status.unmapped_data, f.runLegacy());
    }
    // Read-only memory: READ_ONLY whatever the producer said, in both generations.
    f.managed.dl_tensor.data = @ptrFromInt(base + page);
    f.legacy.dl_tensor.data = @ptrFromInt(base + page);
    try testing.expectEqual(Status.ok, f.run());
    try testing.expectEqual(@as(u32, 1), f.out.flags);
    try testing.expect(f.out.layout & abi.layout.data_readonly != 0);
    try testing.expectEqual(Status.ok, f.runLegacy());
    try testing.expectEqual(@as(u32, 1), f.out.flags);
    // From the writable page into the read-only one: read-only; a negative stride reaching back
    // into the writable page from the read-only one too.
    f.managed.dl_tensor.data = @ptrFromInt(base + page - 8);
    try testing.expectEqual(Status.ok, f.run());
    try testing.expectEqual(@as(u32, 1), f.out.flags);
    f.init(f32_t, &.{4}, &.{-1});
    f.managed.dl_tensor.data = @ptrFromInt(base + page + 4);
    try testing.expectEqual(Status.ok, f.run());
    try testing.expectEqual(@as(u32, 1), f.out.flags);
    f.managed.dl_tensor.data = @ptrFromInt(base + 12);
    try testing.expectEqual(Status.ok, f.run());
    try testing.expectEqual(@as(u32, 0), f.out.flags);
    try testing.expectEqual(@as(u32, 0), f.out.layout & abi.layout.data_readonly);
    f.managed.dl_tensor.data = @ptrFromInt(base + 8);
    try testing.expectEqual(Status.unmapped_data, f.run());
    // Empty tensors point anywhere; device memory is no host mapping (the driver's to check).
    f.init(f32_t, &.{ 3, 0 }, &.{ 1, 1 });
    f.managed.dl_tensor.data = @ptrFromInt(16);
    try testing.expectEqual(Status.ok, f.run());
    f.init(f32_t, &.{2}, &.{1});
    f.managed.dl_tensor.device.device_type = @intFromEnum(dlpack.DeviceType.cuda);
    f.managed.dl_tensor.data = @ptrFromInt(16);
    try testing.expectEqual(Status.ok, f.run());
}

test "a deleter must be executable code; the refusal says which generation the struct looks like" {
    if (!mappings.available() or @import("builtin").os.tag != .linux) return error.SkipZigTest;
    // Data in a page of our own (valgrind maps the heap, and maybe the stack, executable).
    const region = try fresh.freshRegion(1);
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
        try testing.expectEqual(@intFromEnum(abi.DeleterHint.none), f.out.detail_limit);
    }
    // A versioned struct read as legacy: the legacy deleter slot holds the shape pointer.
    f.managed.deleter = testDeleter;
    try testing.expectEqual(
        Status.bad_deleter,
        describe(@intFromPtr(&f.managed), .{ .versioned = false }, &f.out),
    );
    try testing.expectEqual(@as(i64, @intCast(data)), f.out.detail_found);
    try testing.expectEqual(@intFromEnum(abi.DeleterHint.looks_versioned), f.out.detail_limit);
    // A legacy struct read as versioned: ndim and dtype sit in the versioned deleter slot.
    f.legacy.deleter = testLegacyDeleter;
    try testing.expectEqual(Status.ok, f.runLegacy());
    try testing.expectEqual(
        Status.bad_deleter,
        describe(@intFromPtr(&f.legacy), .{ .versioned = true }, &f.out),
    );
    try testing.expectEqual(@intFromEnum(abi.DeleterHint.looks_legacy), f.out.detail_limit);
}

test "this library's exports: the real generation, taken and released ones are recognised" {
    if (!mappings.available()) return error.SkipZigTest;
    var data = [_]f32{ 1, 2 };
    for ([_]bool{ true, false }) |versioned| {
        const managed = try exports.create(.{
            .data = @intFromPtr(&data),
            .device = .{ .device_type = 1, .device_id = 0 },
            .dtype = f32_t,
            .shape = &.{2},
            .strides = &.{1},
            .flags = 0,
            .versioned = versioned,
            .adopt_owner = false,
            .owner = null,
        });
        var out: Description = undefined;
        try testing.expectEqual(Status.ok, describe(managed, .{ .versioned = versioned }, &out));
        try testing.expectEqual(
            Status.generation,
            describe(managed, .{ .versioned = !versioned }, &out),
        );
        try testing.expectEqual(@as(i64, @intFromBool(versioned)), out.detail_limit);

        // A copy of the struct carries this library's deleter but is not an export.
        var copy: dlpack.ManagedTensorVersioned align(16) = undefined;
        const original: [*]const u8 = @ptrFromInt(managed);
        @memcpy(std.mem.asBytes(&copy)[0..64], original[0..64]);
        if (versioned) @memcpy(std.mem.asBytes(&copy)[64..80], original[64..80]);
        try testing.expectEqual(
            Status.bad_deleter,
            describe(@intFromPtr(&copy), .{ .versioned = versioned }, &out),
        );
        try testing.expectEqual(@intFromEnum(abi.DeleterHint.copied_export), out.detail_limit);

        try testing.expect(exports.claim(managed));
        try testing.expect(!exports.claim(managed));
        try testing.expectEqual(
            Status.already_imported,
            describe(managed, .{ .versioned = versioned }, &out),
        );
        try testing.expectEqual(
            Status.already_imported,
            describe(managed, .{ .versioned = !versioned }, &out),
        );
        dlpack.deleteManaged(managed, versioned);
        // Quarantined, poisoned: a stale address is recognised, and a second deleter call is
        // harmless.
        try testing.expectEqual(
            Status.released_export,
            describe(managed, .{ .versioned = versioned }, &out),
        );
        try testing.expectEqual(
            Status.released_export,
            describe(managed, .{ .versioned = !versioned }, &out),
        );
        dlpack.deleteManaged(managed, versioned);
    }
}

test "keyed facts: the generation moves only when a fact changes" {
    var keyed = std.mem.zeroes(abi.KeyedDescription);
    keyed.description.ndim = 2;
    keyed.description.device_type = 1;
    keyed.description.shape[0] = 3;
    keyed.description.shape[1] = 4;
    keyed.description.strides[0] = 4;
    keyed.description.strides[1] = 1;
    keyed.description.size = 12;
    keyed.description.setOwner(0x1234_5678_9abc);
    keyed.description.setAddress(abi.exact_max);
    keyFacts(&keyed);
    try testing.expectEqual(@as(f64, 1), keyed.generation);
    try testing.expectEqual(@as(f64, 0x1234_5678_9abc), keyed.owner);
    try testing.expectEqual(@as(f64, -1), keyed.address);
    // Addresses, the owner and the details are not facts of the layout.
    keyed.description.setAddress(64);
    keyed.description.owner_lo = 128;
    keyed.description.byte_offset = 8;
    keyed.description.detail_found = 5;
    keyFacts(&keyed);
    try testing.expectEqual(@as(f64, 1), keyed.generation);
    try testing.expectEqual(@as(f64, 64), keyed.address);
    // Each fact, in either range or the extents, moves it.
    keyed.description.dtype_bits = 64;
    keyFacts(&keyed);
    try testing.expectEqual(@as(f64, 2), keyed.generation);
    keyed.description.max_offset = 11;
    keyFacts(&keyed);
    try testing.expectEqual(@as(f64, 3), keyed.generation);
    keyed.description.strides[1] = -0.0;
    keyFacts(&keyed);
    try testing.expectEqual(@as(f64, 4), keyed.generation);
    keyed.description.shape[1] = 5;
    keyFacts(&keyed);
    try testing.expectEqual(@as(f64, 5), keyed.generation);
    // Entries past ndim are not compared.
    keyed.description.shape[2] = 9;
    keyFacts(&keyed);
    try testing.expectEqual(@as(f64, 5), keyed.generation);
    keyed.description.ndim = 1;
    keyFacts(&keyed);
    try testing.expectEqual(@as(f64, 6), keyed.generation);
}
