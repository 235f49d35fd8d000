//! The C ABI of libdlpack: the only symbols the TS side binds (ffi/symbols.ts lists the same ones).
//! Every function returns a status code or writes into caller-owned memory; nothing here may panic
//! or unwind into the host.

const std = @import("std");
const dlpack = @import("dlpack.zig");
const describe = @import("describe.zig");
const owner = @import("owner.zig");
const stats = @import("stats.zig");
const exports = @import("exports.zig");
const memory = @import("memory.zig");

/// Bumped whenever a symbol, a signature or a shared struct layout changes. The TS loader refuses a
/// library whose number differs from its own.
pub const ABI_VERSION: u32 = 2;

pub const IMPORT_VERSIONED: u32 = 1;
pub const IMPORT_STRICT_OFFSET: u32 = 2;
/// The caller (a Python capsule consumer) leaves a refused tensor to its capsule's destructor.
pub const IMPORT_KEEP_ON_REFUSAL: u32 = 4;

export fn dlpk_abi_version() u32 {
    return ABI_VERSION;
}

export fn dlpk_description_size() u32 {
    return @sizeOf(describe.Description);
}

fn descriptionAt(out: usize) ?*describe.Description {
    if (out == 0 or out % @alignOf(describe.Description) != 0) return null;
    return @ptrFromInt(out);
}

/// Validates a managed tensor and, when it is accepted, makes an owner holding it. A refused tensor
/// goes back to its producer (deleter called once) before this returns, unless the caller asked to
/// keep it.
export fn dlpk_import(managed: usize, options: u32, out_address: usize) i32 {
    const out = descriptionAt(out_address) orelse return @intFromEnum(describe.Status.invalid_argument);
    const versioned = options & IMPORT_VERSIONED != 0;
    const keep = options & IMPORT_KEEP_ON_REFUSAL != 0;
    var status = describe.describe(managed, .{
        .versioned = versioned,
        .strict_offset = options & IMPORT_STRICT_OFFSET != 0,
    }, out);
    if (status == .ok) {
        if (owner.create(if (versioned) .versioned else .legacy, managed, 0)) |created| {
            out.setOwner(@intFromPtr(created));
            return 0;
        }
        status = .out_of_memory;
        out.status = @intFromEnum(status);
    }
    // A pointer that cannot be a struct has no deleter we could find.
    if (managed != 0 and !keep and status != .bad_address) {
        dlpack.deleteManaged(managed, versioned);
        stats.add(.deleters_called, 1);
    }
    return @intFromEnum(status);
}

pub const EXPORT_VERSIONED: u32 = 1;
/// The export takes over the caller's owner reference instead of adding one.
pub const EXPORT_ADOPT_OWNER: u32 = 2;

/// Reads an integral f64 the TS side wrote; null when it is not an exact integer in range.
fn exactInt(value: f64) ?i64 {
    if (!(value >= -describe.MAX_EXACT_F and value <= describe.MAX_EXACT_F)) return null;
    if (@floor(value) != value) return null;
    return @intFromFloat(value);
}

/// Builds an export from the description at `spec_address`: data address (address_lo/hi), owner,
/// device, dtype, flags, ndim, shape and strides. On success writes the managed struct's address
/// into address_lo/hi. The TS side has checked the layout against the memory it points into.
export fn dlpk_export(options: u32, spec_address: usize) i32 {
    const spec = descriptionAt(spec_address) orelse return @intFromEnum(describe.Status.invalid_argument);
    if (spec.ndim < 0 or spec.ndim > dlpack.MAX_RANK) return @intFromEnum(describe.Status.rank);
    const ndim: usize = @intCast(spec.ndim);
    var shape: [dlpack.MAX_RANK]i64 = undefined;
    var strides: [dlpack.MAX_RANK]i64 = undefined;
    for (0..ndim) |d| {
        shape[d] = exactInt(spec.shape[d]) orelse return @intFromEnum(describe.Status.shape);
        strides[d] = exactInt(spec.strides[d]) orelse return @intFromEnum(describe.Status.strides);
    }
    const owner_address = @as(usize, spec.owner_hi) << 32 | spec.owner_lo;
    const managed = exports.create(.{
        .data = @as(usize, spec.address_hi) << 32 | spec.address_lo,
        .device = .{ .device_type = spec.device_type, .device_id = spec.device_id },
        .dtype = .{ .code = @intCast(spec.dtype_code), .bits = @intCast(spec.dtype_bits), .lanes = 1 },
        .shape = shape[0..ndim],
        .strides = strides[0..ndim],
        .flags = spec.flags,
        .versioned = options & EXPORT_VERSIONED != 0,
        .adopt_owner = options & EXPORT_ADOPT_OWNER != 0,
        .owner = if (owner_address == 0) null else @ptrFromInt(owner_address),
    }) orelse return @intFromEnum(describe.Status.out_of_memory);
    spec.setAddress(managed);
    return 0;
}

/// Calls a managed tensor's deleter (a capsule disposed before anyone took it).
export fn dlpk_managed_delete(managed: usize, versioned: u32) void {
    if (managed == 0) return;
    dlpack.deleteManaged(managed, versioned != 0);
}

/// Whether `managed` was made by `dlpk_export` (1) or not (0).
export fn dlpk_is_own_export(managed: usize, versioned: u32) u32 {
    if (managed == 0) return 0;
    return @intFromBool(exports.isOwnExport(managed, versioned != 0));
}

/// Allocates library memory; writes its address and owner into the description at `out_address`.
export fn dlpk_alloc(bytes: f64, alignment: f64, zero: u32, out_address: usize) i32 {
    const out = descriptionAt(out_address) orelse return @intFromEnum(describe.Status.invalid_argument);
    const size = exactInt(bytes) orelse return @intFromEnum(describe.Status.overflow);
    const align_bytes = exactInt(alignment) orelse return @intFromEnum(describe.Status.invalid_argument);
    if (size < 0) return @intFromEnum(describe.Status.overflow);
    if (align_bytes <= 0 or align_bytes > 1 << 20 or !std.math.isPowerOfTwo(align_bytes)) {
        return @intFromEnum(describe.Status.invalid_argument);
    }
    const created = memory.allocate(@intCast(size), @intCast(align_bytes), zero != 0) orelse
        return @intFromEnum(describe.Status.out_of_memory);
    out.setAddress(created.payload);
    out.setOwner(@intFromPtr(created));
    return 0;
}

/// Copies the strided tensor the description at `spec_address` describes (address, ndim, shape,
/// strides) into `dst` in C order, `itemsize` bytes per element.
export fn dlpk_copy(spec_address: usize, dst: usize, itemsize: u32) i32 {
    const spec = descriptionAt(spec_address) orelse return @intFromEnum(describe.Status.invalid_argument);
    if (spec.ndim < 0 or spec.ndim > dlpack.MAX_RANK or itemsize == 0 or dst == 0) {
        return @intFromEnum(describe.Status.invalid_argument);
    }
    const ndim: usize = @intCast(spec.ndim);
    var shape: [dlpack.MAX_RANK]i64 = undefined;
    var strides: [dlpack.MAX_RANK]i64 = undefined;
    for (0..ndim) |d| {
        shape[d] = exactInt(spec.shape[d]) orelse return @intFromEnum(describe.Status.shape);
        strides[d] = exactInt(spec.strides[d]) orelse return @intFromEnum(describe.Status.strides);
    }
    const src = @as(usize, spec.address_hi) << 32 | spec.address_lo;
    memory.copyStrided(@ptrFromInt(dst), @ptrFromInt(src), itemsize, shape[0..ndim], strides[0..ndim]);
    return 0;
}

export fn dlpk_owner_retain(address: usize) void {
    if (address == 0) return;
    owner.retain(@ptrFromInt(address));
}

export fn dlpk_owner_release(address: usize) void {
    if (address == 0) return;
    owner.release(@ptrFromInt(address));
}

/// Creates a pin owner: `id` names a JS object the JS side keeps reachable until the id comes back
/// from `dlpk_pins_drain`.
export fn dlpk_pin_new(id: f64, bytes: f64, out_address: usize) i32 {
    const out = descriptionAt(out_address) orelse return @intFromEnum(describe.Status.invalid_argument);
    if (!(id >= 0 and id < describe.MAX_EXACT and bytes >= 0 and bytes < describe.MAX_EXACT)) {
        return @intFromEnum(describe.Status.invalid_argument);
    }
    const created = owner.create(.pin, @intFromFloat(id), @intFromFloat(bytes)) orelse
        return @intFromEnum(describe.Status.out_of_memory);
    out.setOwner(@intFromPtr(created));
    return 0;
}

export fn dlpk_pins_drain(out: [*]f64, capacity: u32) u32 {
    return @intCast(owner.drainReleasedPins(out[0..capacity]));
}

export fn dlpk_stats(out: *[stats.COUNT]f64) u32 {
    stats.snapshot(out);
    return stats.COUNT;
}

test {
    std.testing.refAllDecls(@This());
    _ = dlpack;
    _ = describe;
    _ = owner;
    _ = stats;
    _ = exports;
    _ = memory;
}

// ---------------------------------------------------------------------------------------------
// Pin realms (reliability issue): each JS realm (main thread, each Worker) drains only the pins it
// made. The realm-less dlpk_pin_new / dlpk_pins_drain above share one queue across realms, where a
// Worker could unpin the main thread's buffer that happens to carry the same id.

/// A new realm record (never freed; see owner.createRealm), or 0 when out of memory.
export fn dlpk_realm_new() usize {
    const realm = owner.createRealm() orelse return 0;
    return @intFromPtr(realm);
}

/// `dlpk_pin_new` for a pin whose release is queued for `realm`.
export fn dlpk_pin_new_in(realm: usize, id: f64, bytes: f64, out_address: usize) i32 {
    const out = descriptionAt(out_address) orelse return @intFromEnum(describe.Status.invalid_argument);
    if (realm == 0 or realm % @alignOf(owner.Realm) != 0) return @intFromEnum(describe.Status.invalid_argument);
    if (!(id >= 0 and id < describe.MAX_EXACT and bytes >= 0 and bytes < describe.MAX_EXACT)) {
        return @intFromEnum(describe.Status.invalid_argument);
    }
    const created = owner.createIn(@ptrFromInt(realm), .pin, @intFromFloat(id), @intFromFloat(bytes)) orelse
        return @intFromEnum(describe.Status.out_of_memory);
    out.setOwner(@intFromPtr(created));
    return 0;
}

/// `dlpk_pins_drain` for one realm's released pins.
export fn dlpk_pins_drain_in(realm: usize, out: [*]f64, capacity: u32) u32 {
    if (realm == 0 or realm % @alignOf(owner.Realm) != 0) return 0;
    return @intCast(owner.drainRealm(@ptrFromInt(realm), out[0..capacity]));
}
