//! Exports: managed tensors this library hands to other consumers. Each one holds a reference to
//! the owner of the memory it describes (a producer's import, a library allocation, or a JS pin),
//! so chains keep the first producer alive. The deleters are plain native code: safe on any
//! thread, never calling into JS.

const std = @import("std");
const builtin = @import("builtin");
const assert = std.debug.assert;
const abi = @import("abi.zig");
const dlpack = @import("dlpack.zig");
const owner_mod = @import("owner.zig");
const stats = @import("stats.zig");
const cuda = @import("cuda.zig");
const mappings = @import("mappings.zig");
const memory = @import("memory.zig");

const Owner = owner_mod.Owner;
const DeviceType = dlpack.DeviceType;

/// One allocation per export: the managed struct first (so its address is the record's), the owner
/// reference, then `ndim` shape and `ndim` stride words.
const Record = extern struct {
    managed: extern union {
        versioned: dlpack.ManagedTensorVersioned,
        legacy: dlpack.ManagedTensor,
    },
    owner: ?*Owner,
    ndim: u32,
    versioned: u32,
    /// CUDA data: the producer stream the data becomes ready on, and an event recorded on it when
    /// the stream was attached (0 when none). The event belongs to device `cuda_device`.
    cuda_stream: usize,
    cuda_event: usize,
    cuda_device: i32,
    /// A `State`, changed atomically: whether an import of this library took the export.
    state: u32,

    fn dims(self: *Record) [*]i64 {
        const base: [*]u8 = @ptrCast(self);
        return @ptrCast(@alignCast(base + @sizeOf(Record)));
    }

    /// The record's whole allocation (`allocationBytes` of its rank).
    fn allocation(self: *Record) []align(@alignOf(Record)) u8 {
        assert(self.ndim <= dlpack.rank_max);
        const base: [*]align(@alignOf(Record)) u8 = @ptrCast(self);
        return base[0..allocationBytes(self.ndim)];
    }
};

// `recognize` reads these words of either generation within the smaller struct's 64 bytes.
const versioned_ctx_offset = @offsetOf(dlpack.ManagedTensorVersioned, "manager_ctx");
const versioned_deleter_offset = @offsetOf(dlpack.ManagedTensorVersioned, "deleter");
const legacy_ctx_offset = @offsetOf(dlpack.ManagedTensor, "manager_ctx");
const legacy_deleter_offset = @offsetOf(dlpack.ManagedTensor, "deleter");

comptime {
    assert(@offsetOf(Record, "managed") == 0);
    assert(@sizeOf(Record) % @alignOf(i64) == 0);
    assert(versioned_deleter_offset + @sizeOf(usize) <= @sizeOf(dlpack.ManagedTensor));
    assert(legacy_deleter_offset + @sizeOf(usize) <= @sizeOf(dlpack.ManagedTensor));
}

/// Where an export stands. A live export goes to exactly one import of this library (which
/// takes it) or one other consumer; its deleter makes it released.
pub const State = enum(u32) {
    /// Made and not yet taken by an import of this library.
    live = 0,
    /// An import of this library took it: importing the same address again is refused.
    taken = 1,
    /// Its deleter ran. The record stays in quarantine (below) a while before it is freed, with
    /// its deleter slot pointing at a function that does nothing, so that a stale address is
    /// recognised (and a consumer calling the deleter twice is harmless) until then.
    released = 2,
};

/// What an export describes. Callers have validated it against the memory it points into:
/// extents are not negative.
pub const Spec = struct {
    data: usize,
    device: dlpack.Device,
    dtype: dlpack.DataType,
    shape: []const i64,
    strides: []const i64,
    flags: u64,
    versioned: bool,
    /// Takes over one reference the caller holds (else retains a new one).
    adopt_owner: bool,
    owner: ?*Owner,
};

fn recordBytes(ndim: usize) usize {
    assert(ndim <= dlpack.rank_max);
    return @sizeOf(Record) + 2 * ndim * @sizeOf(i64);
}

/// Records of rank up to `pooled_rank` share one size, so a released one can be reused by the
/// next export of any such rank (see `Pool`).
const pooled_rank = 4;

/// What a record of rank `ndim` occupies: at least the pooled size.
fn allocationBytes(ndim: usize) usize {
    return recordBytes(@max(ndim, pooled_rank));
}

/// Builds an export. Returns the managed struct's address; when out of memory, the owner
/// reference the caller offered to adopt is still the caller's.
pub fn create(spec: Spec) error{OutOfMemory}!usize {
    assert(spec.shape.len == spec.strides.len);
    const started = try draft(spec.shape.len);
    @memcpy(started.shape(), spec.shape);
    @memcpy(started.strides(), spec.strides);
    return finish(started, spec);
}

/// An export whose record is allocated and whose shape and strides the caller writes in place
/// (no copy through the stack): then `finish` completes it, or `abandon` frees it.
pub const Draft = struct {
    record: *Record,

    pub fn shape(self: Draft) []i64 {
        return self.record.dims()[0..self.record.ndim];
    }

    pub fn strides(self: Draft) []i64 {
        const ndim: usize = self.record.ndim;
        return self.record.dims()[ndim .. 2 * ndim];
    }
};

/// Allocates the record of an export of rank `ndim`.
pub fn draft(ndim: usize) error{OutOfMemory}!Draft {
    assert(ndim <= dlpack.rank_max);
    const record = pool.reuse(ndim) orelse fresh: {
        const bytes = try memory.createBytes(Record, allocationBytes(ndim));
        break :fresh @as(*Record, @ptrCast(bytes.ptr));
    };
    record.ndim = @intCast(ndim);
    return .{ .record = record };
}

/// Frees a draft that will not become an export.
pub fn abandon(started: Draft) void {
    memory.destroyBytes(Record, started.record.allocation());
}

/// Completes a draft whose shape and strides are written: `spec.shape` and `spec.strides` are
/// its extents (their lengths its rank; their values are read from the draft). Returns the managed
/// struct's address.
pub fn finish(started: Draft, spec: Spec) usize {
    const record = started.record;
    const ndim: usize = record.ndim;
    assert(spec.shape.len == ndim and spec.strides.len == ndim);
    const dims = record.dims();
    for (dims[0..ndim]) |extent| assert(extent >= 0);
    if (spec.owner) |o| {
        if (!spec.adopt_owner) owner_mod.retain(o);
    }
    // Field by field: `managed` is written below, and an `undefined` in a struct literal costs a
    // memset in safe builds (this is the export path).
    record.owner = spec.owner;
    record.versioned = @intFromBool(spec.versioned);
    record.cuda_stream = 0;
    record.cuda_event = 0;
    record.cuda_device = 0;
    record.state = @intFromEnum(State.live);
    const tensor = dlpack.Tensor{
        .data = @ptrFromInt(spec.data),
        .device = spec.device,
        .ndim = @intCast(ndim),
        .dtype = spec.dtype,
        // A 0-d tensor still gets valid (empty) arrays: some consumers dereference them.
        .shape = dims,
        .strides = dims + ndim,
        .byte_offset = 0,
    };
    if (spec.versioned) {
        record.managed = .{ .versioned = .{
            .version = .{ .major = dlpack.version_major, .minor = dlpack.version_minor },
            .manager_ctx = record,
            .deleter = versionedDeleter,
            .flags = spec.flags,
            .dl_tensor = tensor,
        } };
    } else {
        record.managed = .{ .legacy = .{
            .dl_tensor = tensor,
            .manager_ctx = record,
            .deleter = legacyDeleter,
        } };
    }
    stats.add(.exports, 1);
    const managed = @intFromPtr(record);
    assert(dlpack.isManagedAddress(managed));
    return managed;
}

fn destroy(record: *Record) void {
    if (retire(record)) |held| owner_mod.release(held);
}

/// Everything a release does to the record itself; returns the owner reference it held.
fn retire(record: *Record) ?*owner_mod.Owner {
    if (record.cuda_event != 0) cuda.eventDestroy(record.cuda_device, record.cuda_event) catch {};
    const o = record.owner;
    poison(record);
    @call(.always_inline, quarantine, .{record});
    stats.add(.exports, -1);
    return o;
}

/// Releases a live export the JS side made and still holds (a capsule disposed from JS) as its
/// deleter would, except that a pin it held the last reference to is freed at once
/// (`owner.releaseHere`). Returns that pin's id, or 0. Does nothing unless `managed` is a live
/// export of this library; the caller has checked that its first `record_bytes` bytes are
/// readable.
pub fn disposeHeld(managed: usize) u64 {
    assert(dlpack.isManagedAddress(managed));
    const own = recognizeWith(managed, true) orelse return 0;
    if (own.state != .live or !claim(managed)) return 0;
    const record: *Record = @ptrFromInt(managed);
    assert(record.versioned == @intFromBool(own.versioned));
    // Inlined: one lookup of this thread's state for the export pool, the counters and the pin.
    const held = @call(.always_inline, retire, .{record}) orelse return 0;
    return owner_mod.releaseHere(held);
}

fn versionedDeleter(self: *dlpack.ManagedTensorVersioned) callconv(.c) void {
    destroy(@ptrCast(@alignCast(self.manager_ctx.?)));
}

fn legacyDeleter(self: *dlpack.ManagedTensor) callconv(.c) void {
    destroy(@ptrCast(@alignCast(self.manager_ctx.?)));
}

/// Calls of a released export's deleter (a consumer calling it twice), which do nothing. Two
/// counters, so the two functions differ and keep distinct addresses.
var late_versioned_calls = std.atomic.Value(u64).init(0);
var late_legacy_calls = std.atomic.Value(u64).init(0);

fn releasedVersionedDeleter(_: *dlpack.ManagedTensorVersioned) callconv(.c) void {
    _ = late_versioned_calls.fetchAdd(1, .monotonic);
}

fn releasedLegacyDeleter(_: *dlpack.ManagedTensor) callconv(.c) void {
    _ = late_legacy_calls.fetchAdd(1, .monotonic);
}

/// Marks a record released: its deleter slot points at a function that does nothing.
fn poison(record: *Record) void {
    const base = @intFromPtr(record);
    // Atomic: an import of the same address may be reading the slot on another thread.
    if (record.versioned != 0) {
        const slot = wordAt(base + versioned_deleter_offset);
        @atomicStore(usize, slot, @intFromPtr(&releasedVersionedDeleter), .release);
    } else {
        const slot = wordAt(base + legacy_deleter_offset);
        @atomicStore(usize, slot, @intFromPtr(&releasedLegacyDeleter), .release);
    }
    @atomicStore(u32, &record.state, @intFromEnum(State.released), .release);
}

fn wordAt(address: usize) *usize {
    return @ptrFromInt(address);
}

fn loadWord(address: usize) usize {
    return @atomicLoad(usize, @as(*const usize, @ptrFromInt(address)), .monotonic);
}

/// Released records wait in quarantine before their memory is used again, so that a stale
/// address still finds the poisoned deleter slot (and is refused) for a while. Each thread has
/// its own ring (`Pool`); a thread without one (its end hook could not be armed, or it is ending)
/// uses the shared ring below. A ring holds `quarantine_count` records; each release pushes one
/// and displaces the oldest.
const quarantine_count = 128;
var quarantine_ring = [_]usize{0} ** quarantine_count;
var quarantine_next = std.atomic.Value(usize).init(0);

fn quarantine(record: *Record) void {
    assert(@atomicLoad(u32, &record.state, .acquire) == @intFromEnum(State.released));
    if (pool.admit(record)) return;
    // The cursor is advanced without a locked instruction: two threads that race may pick the same
    // slot, which only shortens one record's stay. The exchange below is what frees each record
    // exactly once.
    const next = quarantine_next.load(.monotonic);
    quarantine_next.store(next +% 1, .monotonic);
    const slot = next % quarantine_count;
    const evicted = @atomicRmw(usize, &quarantine_ring[slot], .Xchg, @intFromPtr(record), .acq_rel);
    if (evicted == 0) return;
    assert(evicted != @intFromPtr(record));
    const old: *Record = @ptrFromInt(evicted);
    memory.destroyBytes(Record, old.allocation());
}

/// A thread's quarantine ring and its spare records. Only its thread touches it, so a release
/// costs no locked instruction; the record a release displaces (quarantined for the thread's
/// last `quarantine_count` releases) becomes a spare that a later export of a pooled rank on the
/// thread reuses instead of a malloc. Records stay records while pooled: a stale address reads a
/// poisoned or a live export of this library, never foreign data. The thread's end frees them.
const Pool = struct {
    ring: [quarantine_count]?*Record = @splat(null),
    next: u32 = 0,
    spares: [spare_max]*Record = undefined,
    spare_count: u8 = 0,
    state: enum(u8) { unset, on, closed } = .unset,

    /// A spare, for a record of rank `ndim`; null when there is none or the rank is too large.
    fn reuse(self: *Pool, ndim: usize) ?*Record {
        if (ndim > pooled_rank or self.spare_count == 0) return null;
        self.spare_count -= 1;
        const record = self.spares[self.spare_count];
        assert(record.ndim <= pooled_rank);
        return record;
    }

    /// Quarantines a released record in this thread's ring; false when the thread has none.
    inline fn admit(self: *Pool, record: *Record) bool {
        if (self.state != .on and !(self.state == .unset and self.arm())) return false;
        const slot = &self.ring[self.next % quarantine_count];
        self.next +%= 1;
        const evicted = slot.* orelse {
            slot.* = record;
            return true;
        };
        slot.* = record;
        assert(evicted != record);
        if (self.spare_count < spare_max and evicted.ndim <= pooled_rank) {
            self.spares[self.spare_count] = evicted;
            self.spare_count += 1;
        } else memory.destroyBytes(Record, evicted.allocation());
        return true;
    }

    /// Arms the thread-end hook that frees this thread's records (once per thread).
    fn arm(self: *Pool) bool {
        assert(self.state == .unset);
        self.state = .closed;
        if (!pool_hooks) return false;
        pool_key_once.call();
        // The key's value only needs to be non-null for its destructor to run.
        if (!pool_key_ready or std.c.pthread_setspecific(pool_key, &pool_key) != 0) return false;
        self.state = .on;
        return true;
    }

    /// Frees every record (the thread is ending); later releases use the shared ring.
    fn close(self: *Pool) void {
        self.state = .closed;
        for (&self.ring) |*slot| {
            if (slot.*) |record| memory.destroyBytes(Record, record.allocation());
            slot.* = null;
        }
        for (self.spares[0..self.spare_count]) |record| {
            memory.destroyBytes(Record, record.allocation());
        }
        self.spare_count = 0;
    }
};

/// Spares a thread keeps: two, because exports are often released in pairs (a DLPackTensor's
/// template and the clone its consumer held), each pair followed by two new exports.
const spare_max = 2;

const pool_hooks = builtin.os.tag != .windows and builtin.link_libc;
threadlocal var pool: Pool = .{};
var pool_key: if (pool_hooks) std.c.pthread_key_t else void = undefined;
var pool_key_once = std.once(makePoolKey);
var pool_key_ready: bool = false;

fn makePoolKey() void {
    if (!pool_hooks) return;
    pool_key_ready = std.c.pthread_key_create(&pool_key, poolThreadEnded) == .SUCCESS;
}

fn poolThreadEnded(_: *anyopaque) callconv(.c) void {
    pool.close();
}

/// One of this library's exports, found at an address whatever generation the caller claimed.
pub const Own = struct {
    versioned: bool,
    state: State,
};

/// Recognises one of this library's exports (live, taken or released) at `managed`, of either
/// generation: its deleter slot holds this library's deleter (and, unless released, its context
/// slot its own address). The caller has checked that the first 64 bytes are readable. Inline:
/// every import asks, and nearly every answer is a quick no.
pub inline fn recognize(managed: usize) ?Own {
    return recognizeWith(managed, false);
}

/// `recognize` where the caller has checked that `record_bytes` bytes at `managed` are readable.
inline fn recognizeWith(managed: usize, comptime record_readable: bool) ?Own {
    assert(dlpack.isManagedAddress(managed));
    const versioned_deleter = loadWord(managed + versioned_deleter_offset);
    const legacy_deleter = loadWord(managed + legacy_deleter_offset);
    // The four slot and deleter pairs `recognizeFound` accepts, compared inline: nearly every
    // answer is a quick no. perf(native import): a call for it was measurable.
    if (versioned_deleter != @intFromPtr(&versionedDeleter) and
        versioned_deleter != @intFromPtr(&releasedVersionedDeleter) and
        legacy_deleter != @intFromPtr(&legacyDeleter) and
        legacy_deleter != @intFromPtr(&releasedLegacyDeleter)) return null;
    return @call(.never_inline, recognizeFound, .{
        managed,
        versioned_deleter,
        legacy_deleter,
        record_readable,
    });
}

/// The bytes of a record of rank 0: what `disposeHeld`'s caller checks are readable.
pub const record_bytes = @sizeOf(Record);

fn recognizeFound(
    managed: usize,
    versioned_deleter: usize,
    legacy_deleter: usize,
    comptime record_readable: bool,
) ?Own {
    if (versioned_deleter == @intFromPtr(&releasedVersionedDeleter)) {
        return .{ .versioned = true, .state = .released };
    }
    if (legacy_deleter == @intFromPtr(&releasedLegacyDeleter)) {
        return .{ .versioned = false, .state = .released };
    }
    var own: Own = undefined;
    if (versioned_deleter == @intFromPtr(&versionedDeleter) and
        loadWord(managed + versioned_ctx_offset) == managed)
    {
        own.versioned = true;
    } else if (legacy_deleter == @intFromPtr(&legacyDeleter) and
        loadWord(managed + legacy_ctx_offset) == managed)
    {
        own.versioned = false;
    } else return null;
    // The state word lies past the struct: a forged struct at the end of a mapping has none.
    if (!record_readable and !mappings.readable(managed, @sizeOf(Record))) return null;
    const record: *Record = @ptrFromInt(managed);
    own.state = switch (@atomicLoad(u32, &record.state, .acquire)) {
        0 => .live,
        1 => .taken,
        else => .released,
    };
    return own;
}

/// Whether `word` is one of the deleters this library puts into its exports (live or released).
pub fn isExportDeleter(word: usize) bool {
    return word == @intFromPtr(&versionedDeleter) or word == @intFromPtr(&legacyDeleter) or
        word == @intFromPtr(&releasedVersionedDeleter) or
        word == @intFromPtr(&releasedLegacyDeleter);
}

/// Takes a live export `recognize` found: true for exactly one caller, however many race.
pub fn claim(managed: usize) bool {
    assert(dlpack.isManagedAddress(managed));
    const record: *Record = @ptrFromInt(managed);
    const live = @intFromEnum(State.live);
    const taken = @intFromEnum(State.taken);
    return @cmpxchgStrong(u32, &record.state, live, taken, .acq_rel, .monotonic) == null;
}

/// Gives back a claim whose import was refused but whose caller keeps the export. (The state is
/// not asserted: a consumer that calls the deleter of an export it gave away may have released
/// it meanwhile, and a panic here would abort the host.)
pub fn unclaim(managed: usize) void {
    assert(dlpack.isManagedAddress(managed));
    const record: *Record = @ptrFromInt(managed);
    const live = @intFromEnum(State.live);
    const taken = @intFromEnum(State.taken);
    _ = @cmpxchgStrong(u32, &record.state, taken, live, .acq_rel, .monotonic);
}

/// A new export describing the same memory as `template` (a versioned export of ours), holding its
/// own reference to the same owner. A legacy clone drops the flags (the struct has none).
pub fn clone(template: usize, versioned: bool) error{OutOfMemory}!usize {
    assert(isOwnExport(template, true));
    const record: *Record = @ptrFromInt(template);
    assert(record.versioned == 1);
    assert(record.ndim <= dlpack.rank_max);
    const m = &record.managed.versioned;
    const ndim: usize = record.ndim;
    const dims = record.dims();
    return create(.{
        .data = @intFromPtr(m.dl_tensor.data),
        .device = m.dl_tensor.device,
        .dtype = m.dl_tensor.dtype,
        .shape = dims[0..ndim],
        .strides = dims[ndim .. 2 * ndim],
        .flags = if (versioned) m.flags else 0,
        .versioned = versioned,
        .adopt_owner = false,
        .owner = record.owner,
    });
}

/// Whether `managed` is one of this library's live exports of that generation (its deleter is
/// ours). The caller has checked that the struct is readable.
pub fn isOwnExport(managed: usize, versioned: bool) bool {
    assert(dlpack.isManagedAddress(managed));
    if (versioned) {
        const m: *const dlpack.ManagedTensorVersioned = @ptrFromInt(managed);
        return m.deleter == versionedDeleter;
    }
    const m: *const dlpack.ManagedTensor = @ptrFromInt(managed);
    return m.deleter == legacyDeleter;
}

fn recordOf(managed: usize, versioned: bool) ?*Record {
    if (!dlpack.isManagedAddress(managed)) return null;
    if (!mappings.readable(managed, @sizeOf(Record))) return null;
    if (!isOwnExport(managed, versioned)) return null;
    return @ptrFromInt(managed);
}

fn tensorOf(record: *Record) *const dlpack.Tensor {
    if (record.versioned != 0) return &record.managed.versioned.dl_tensor;
    return &record.managed.legacy.dl_tensor;
}

/// Records that an export's CUDA data becomes ready on `stream` (of device `ordinal`): an event is
/// recorded on that stream now and kept with the export until its deleter runs. Only for this
/// library's exports of CUDA-family data, once each.
pub fn attachStream(managed: usize, versioned: bool, ordinal: i32, stream: usize) cuda.Error!void {
    const record = recordOf(managed, versioned) orelse return error.InvalidArgument;
    if (record.cuda_event != 0 or !DeviceType.isCudaFamily(tensorOf(record).device.device_type)) {
        return error.InvalidArgument;
    }
    const event = try cuda.eventCreate(ordinal);
    cuda.eventRecord(ordinal, event, stream) catch |err| {
        cuda.eventDestroy(ordinal, event) catch {};
        return err;
    };
    assert(event != 0);
    record.cuda_stream = stream;
    record.cuda_event = event;
    record.cuda_device = ordinal;
}

/// Whether one of our versioned exports has an attached producer stream (`attachStream`): its data
/// is ready only in that stream's order, which consumers that take no stream cannot follow.
pub fn hasProducerStream(managed: usize) bool {
    const record = recordOf(managed, true) orelse return false;
    return record.cuda_event != 0;
}

/// The producer side of `__dlpack__(stream=...)` for an export, callable from any thread (the
/// Python bridge's `__dlpack__`): `consumer` is the protocol value as an unsigned word (-1: no
/// synchronization; 0: refused; 1, 2 or a handle). With an attached producer stream the consumer
/// waits on the event recorded then; without one, on the legacy default stream's work so far.
pub fn fenceForConsumer(managed: usize, versioned: bool, consumer_value: usize) cuda.Error!void {
    const record = recordOf(managed, versioned) orelse return error.InvalidArgument;
    const device = tensorOf(record).device;
    if (!DeviceType.isCudaFamily(device.device_type)) return error.InvalidArgument;
    const consumer = (try cuda.consumerStream(consumer_value)) orelse return;
    if (record.cuda_event != 0) {
        if (cuda.sameStream(record.cuda_stream, consumer)) return;
        return cuda.streamWaitEvent(record.cuda_device, consumer, record.cuda_event);
    }
    const on_device = device.device_type == @intFromEnum(DeviceType.cuda);
    const ordinal = if (on_device) device.device_id else 0;
    return cuda.fence(ordinal, cuda.stream_legacy, consumer);
}

// ---------------------------------------------------------------------------------------------
// Tests

const testing = std.testing;

/// Builds an export from a description (`dlpk_export`): data address, owner, device, dtype, flags,
/// ndim, shape and strides; on success writes the managed struct's address into the address
/// fields. The JS side has checked the layout against the memory it points into.
pub fn fromDescription(spec: *abi.Description, options: u32) abi.Status {
    if (spec.ndim < 0 or spec.ndim > dlpack.rank_max) return .rank;
    // The shape and strides are decoded straight into the export's record (a stack copy of the
    // largest rank would cost more than the export).
    const started = draft(@intCast(spec.ndim)) catch return .out_of_memory;
    const refused = memory.dimsOf(spec, started.shape(), started.strides()) orelse checkDtype(spec);
    if (refused) |status| {
        abandon(started);
        return status;
    }
    const owner_address = @as(usize, spec.owner_hi) << 32 | spec.owner_lo;
    const managed = finish(started, .{
        .data = spec.address(),
        .device = .{ .device_type = spec.device_type, .device_id = spec.device_id },
        .dtype = .{
            .code = @intCast(spec.dtype_code),
            .bits = @intCast(spec.dtype_bits),
            .lanes = 1,
        },
        .shape = started.shape(),
        .strides = started.strides(),
        .flags = spec.flags,
        .versioned = options & abi.export_option.versioned != 0,
        .adopt_owner = options & abi.export_option.adopt_owner != 0,
        .owner = if (owner_address == 0) null else @ptrFromInt(owner_address),
    });
    spec.setAddress(managed);
    return .ok;
}

fn checkDtype(spec: *const abi.Description) ?abi.Status {
    if (spec.dtype_code > std.math.maxInt(u8) or spec.dtype_bits > std.math.maxInt(u8)) {
        return .dtype;
    }
    return null;
}

/// The export of a whole TypedArray (`dlpk_export_array`): `extent` elements of `dtype` from
/// `base`, 1-D and contiguous on the CPU, pinned as `id` of `realm` (`bytes` bytes) for as long as
/// the export lives. Returns the managed struct's address.
pub fn ofArray(
    base: [*]u8,
    realm: *owner_mod.Realm,
    id: usize,
    bytes: usize,
    extent: i64,
    dtype: dlpack.DataType,
    flags: u32,
    options: u32,
) error{OutOfMemory}!usize {
    assert(extent >= 0);
    // Inlined, as `finish` below: in a shared library each function that touches thread-local
    // state (spare records, counters, the export pool) looks its block up once, in a call.
    const pin = try @call(.always_inline, owner_mod.createIn, .{ realm, .pin, id, bytes });
    // Not exported: releasing the pin's only reference queues the id, which JS never recorded.
    errdefer owner_mod.release(pin);
    const started = try draft(1);
    started.shape()[0] = extent;
    started.strides()[0] = 1;
    const managed = @call(.always_inline, finish, .{ started, Spec{
        .data = @intFromPtr(base),
        .device = .{ .device_type = @intFromEnum(dlpack.DeviceType.cpu), .device_id = 0 },
        .dtype = dtype,
        .shape = started.shape(),
        .strides = started.strides(),
        .flags = flags,
        .versioned = options & abi.export_option.versioned != 0,
        .adopt_owner = true,
        .owner = pin,
    } });
    assert(managed != 0);
    return managed;
}

test "an export holds its owner until the consumer calls the deleter" {
    const o = try owner_mod.createNative(64, 64, false);
    const payload = o.payload;
    const shape = [_]i64{ 4, 4 };
    const strides = [_]i64{ 4, 1 };
    const exports_before = stats.get(.exports);
    const managed = try create(.{
        .data = payload,
        .device = .{ .device_type = 1, .device_id = 0 },
        .dtype = .{ .code = 2, .bits = 32, .lanes = 1 },
        .shape = &shape,
        .strides = &strides,
        .flags = dlpack.flag.read_only,
        .versioned = true,
        .adopt_owner = false,
        .owner = o,
    });
    try testing.expect(isOwnExport(managed, true));
    try testing.expect(!isOwnExport(managed, false));
    try testing.expectEqual(exports_before + 1, stats.get(.exports));
    owner_mod.release(o); // the creator's reference; the export keeps the memory alive
    try testing.expectEqual(@as(u32, 1), o.refs.load(.monotonic));

    const m: *dlpack.ManagedTensorVersioned = @ptrFromInt(managed);
    try testing.expectEqual(@as(i64, 4), m.dl_tensor.shape.?[1]);
    try testing.expectEqual(@as(i64, 1), m.dl_tensor.strides.?[1]);
    try testing.expectEqual(dlpack.flag.read_only, m.flags);
    try testing.expectEqual(@as(u32, 1), m.version.major);

    const allocations_before = stats.get(.allocations);
    dlpack.deleteManaged(managed, true);
    try testing.expectEqual(exports_before, stats.get(.exports));
    try testing.expectEqual(allocations_before - 1, stats.get(.allocations));
}

test "an export disposed by its JS holder frees its pin at once; a taken one is left alone" {
    var realm: owner_mod.Realm = .{};
    var values = [_]f32{ 1, 2 };
    const pins_before = stats.get(.pins);
    const exports_before = stats.get(.exports);
    var managed: [2]usize = undefined;
    for (&managed) |*slot| {
        const pin = try owner_mod.createIn(&realm, .pin, 42, 8);
        slot.* = try create(.{
            .data = @intFromPtr(&values),
            .device = .{ .device_type = 1, .device_id = 0 },
            .dtype = .{ .code = 2, .bits = 32, .lanes = 1 },
            .shape = &.{2},
            .strides = &.{1},
            .flags = 0,
            .versioned = true,
            .adopt_owner = true,
            .owner = pin,
        });
    }
    try testing.expectEqual(pins_before + 2, stats.get(.pins));
    // Freed right away: the id comes back and nothing is queued for the realm.
    try testing.expectEqual(@as(u64, 42), disposeHeld(managed[0]));
    var out: [4]f64 = undefined;
    try testing.expectEqual(@as(usize, 0), owner_mod.drainRealm(&realm, &out));
    try testing.expectEqual(@as(u64, 0), disposeHeld(managed[0]));
    // Taken by an import: the JS holder no longer releases it.
    try testing.expect(claim(managed[1]));
    try testing.expectEqual(@as(u64, 0), disposeHeld(managed[1]));
    dlpack.deleteManaged(managed[1], true);
    try testing.expectEqual(@as(usize, 1), owner_mod.drainRealm(&realm, &out));
    try testing.expectEqual(pins_before, stats.get(.pins));
    try testing.expectEqual(exports_before, stats.get(.exports));
}

test "legacy exports and 0-d exports" {
    var value: f64 = 3;
    const managed = try create(.{
        .data = @intFromPtr(&value),
        .device = .{ .device_type = 1, .device_id = 0 },
        .dtype = .{ .code = 2, .bits = 64, .lanes = 1 },
        .shape = &.{},
        .strides = &.{},
        .flags = 0,
        .versioned = false,
        .adopt_owner = false,
        .owner = null,
    });
    const m: *dlpack.ManagedTensor = @ptrFromInt(managed);
    try testing.expectEqual(@as(i32, 0), m.dl_tensor.ndim);
    try testing.expect(m.dl_tensor.shape != null);
    dlpack.deleteManaged(managed, false);
}

test "exports released from many threads" {
    const count = 4000;
    const o = try owner_mod.createNative(8, 8, false);
    var all: [count]usize = undefined;
    for (&all) |*slot| slot.* = try create(.{
        .data = 0,
        .device = .{ .device_type = 1, .device_id = 0 },
        .dtype = .{ .code = 1, .bits = 8, .lanes = 1 },
        .shape = &.{0},
        .strides = &.{1},
        .flags = 0,
        .versioned = true,
        .adopt_owner = false,
        .owner = o,
    });
    owner_mod.release(o);
    const Worker = struct {
        fn run(items: []const usize) void {
            for (items) |m| dlpack.deleteManaged(m, true);
        }
    };
    var threads: [8]std.Thread = undefined;
    for (&threads, 0..) |*t, i| t.* = try std.Thread.spawn(
        .{},
        Worker.run,
        .{all[i * count / 8 .. (i + 1) * count / 8]},
    );
    for (threads) |t| t.join();
}

/// An empty rank-1 uint8 export with no owner.
fn exportRank1(versioned: bool) !usize {
    return create(.{
        .data = 0,
        .device = .{ .device_type = 1, .device_id = 0 },
        .dtype = .{ .code = 1, .bits = 8, .lanes = 1 },
        .shape = &.{0},
        .strides = &.{1},
        .flags = 0,
        .versioned = versioned,
        .adopt_owner = false,
        .owner = null,
    });
}

test "one claim wins among racing imports; a kept refusal gives it back" {
    const managed = try exportRank1(true);
    const Racer = struct {
        fn run(address: usize, wins: *std.atomic.Value(u32)) void {
            if (claim(address)) _ = wins.fetchAdd(1, .monotonic);
        }
    };
    var wins = std.atomic.Value(u32).init(0);
    var threads: [8]std.Thread = undefined;
    for (&threads) |*t| t.* = try std.Thread.spawn(.{}, Racer.run, .{ managed, &wins });
    for (threads) |t| t.join();
    try testing.expectEqual(@as(u32, 1), wins.load(.monotonic));
    try testing.expectEqual(State.taken, recognize(managed).?.state);
    unclaim(managed);
    try testing.expectEqual(State.live, recognize(managed).?.state);
    dlpack.deleteManaged(managed, true);
    try testing.expectEqual(State.released, recognize(managed).?.state);
    try testing.expect(!claim(managed));
}

test "released records stay poisoned through a thread's quarantine, then are reused" {
    const first = try exportRank1(true);
    dlpack.deleteManaged(first, true);
    // Every release up to a full ring later still finds the first record released.
    for (0..quarantine_count - 1) |_| {
        dlpack.deleteManaged(try exportRank1(false), false);
        try testing.expectEqual(State.released, recognize(first).?.state);
        try testing.expect(!claim(first));
    }
    // The next release displaces it; a later export of a pooled rank may take its memory, as
    // a live export of this library (never foreign data at a stale address).
    const next = try exportRank1(true);
    dlpack.deleteManaged(next, true);
    const reused = try exportRank1(true);
    if (pool.state == .on) try testing.expectEqual(first, reused);
    try testing.expectEqual(State.live, recognize(reused).?.state);
    dlpack.deleteManaged(reused, true);
    try testing.expectEqual(State.released, recognize(reused).?.state);
}
