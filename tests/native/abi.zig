//! libdlpack's C ABI as a foreign caller sees it, for the native fuzz and stress harnesses. The
//! structs are written out again from the DLPack header's layout (not imported from zig/src) so a
//! layout mistake in the library cannot hide behind a shared definition.

const std = @import("std");

pub const rank_max = 64;
pub const exact_max: u64 = 1 << 53;

pub const Tensor = extern struct {
    data: usize,
    device_type: i32,
    device_id: i32,
    ndim: i32,
    code: u8,
    bits: u8,
    lanes: u16,
    shape: usize,
    strides: usize,
    byte_offset: u64,
};

pub const Legacy = extern struct {
    dl_tensor: Tensor,
    manager_ctx: usize,
    deleter: ?*const fn (*Legacy) callconv(.c) void,
};

pub const Versioned = extern struct {
    major: u32,
    minor: u32,
    manager_ctx: usize,
    deleter: ?*const fn (*Versioned) callconv(.c) void,
    flags: u64,
    dl_tensor: Tensor,
};

/// zig/src/describe.zig `Description`, field by field.
pub const Description = extern struct {
    status: i32,
    detail_dim: i32,
    ndim: i32,
    device_type: i32,
    device_id: i32,
    version_major: i32,
    version_minor: i32,
    flags: u32,
    code: u32,
    bits: u32,
    lanes: u32,
    layout: u32,
    address_lo: u32,
    address_hi: u32,
    owner_lo: u32,
    owner_hi: u32,
    detail_found: i64,
    detail_limit: i64,
    byte_offset: f64,
    size: f64,
    nbytes: f64,
    min_offset: f64,
    max_offset: f64,
    shape: [rank_max]f64,
    strides: [rank_max]f64,

    pub fn address(self: *const Description) u64 {
        return @as(u64, self.address_hi) << 32 | self.address_lo;
    }

    pub fn owner(self: *const Description) usize {
        return @intCast(@as(u64, self.owner_hi) << 32 | self.owner_lo);
    }
};

comptime {
    std.debug.assert(@sizeOf(Tensor) == 48);
    std.debug.assert(@sizeOf(Legacy) == 64);
    std.debug.assert(@sizeOf(Versioned) == 80);
    std.debug.assert(@offsetOf(Versioned, "dl_tensor") == 32);
    std.debug.assert(@sizeOf(Description) == 120 + 16 * rank_max);
}

/// Status codes (zig/src/describe.zig `Status`).
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
    bad_address = 17,
    device_claim = 18,
    cuda = 19,
    unmapped_struct = 20,
    bad_deleter = 21,
    generation = 22,
    already_imported = 23,
    released_export = 24,
    unmapped_data = 25,
    _,
};

pub const import_versioned: u32 = 1;
pub const import_strict_offset: u32 = 2;
pub const import_keep_on_refusal: u32 = 4;
pub const export_versioned: u32 = 1;

pub const flag_read_only: u64 = 1;
pub const flag_is_copied: u64 = 2;
pub const flag_subbyte_padded: u64 = 4;

/// `Description.layout` bits (zig/src/abi.zig `layout`).
pub const layout_device_verified: u32 = 1 << 8;
pub const layout_data_readonly: u32 = 1 << 9;

/// Indices into `dlpk_stats` (zig/src/stats.zig `Counter`).
pub const Stat = enum(usize) {
    imports,
    exports,
    allocations,
    allocation_bytes,
    pins,
    pinned_bytes,
    deleters_called,
    mappings,
    mapped_bytes,
};
pub const stats_count = 9;

/// The exported functions as the library declares them: addresses cross as f64 (exact below 2^53;
/// see zig/src/describe.zig). The wrappers below keep the harnesses in terms of addresses.
const raw = struct {
    extern fn dlpk_description_size() u32;
    extern fn dlpk_import(managed: usize, options: u32) i32;
    extern fn dlpk_scratch() f64;
    extern fn dlpk_export(options: u32, spec_address: f64) i32;
    extern fn dlpk_managed_delete(managed: f64, versioned: u32) void;
    extern fn dlpk_owner_retain(address: f64) void;
    extern fn dlpk_owner_release(address: f64) void;
    extern fn dlpk_alloc(bytes: f64, alignment: f64, zero: u32, out_address: f64) i32;
    extern fn dlpk_stats(out_address: f64) u32;
    extern fn dlpk_realm_new() f64;
    extern fn dlpk_pin_new(realm: f64, id: f64, bytes: f64, out_address: f64) i32;
    extern fn dlpk_pins_drain(realm: f64, out_address: f64, capacity: u32) u32;
    extern fn dlpk_journal() f64;
};

/// This thread's journal of releases (zig/src/journal.zig): its count comes first.
const Journal = extern struct { count: i32 };

fn journal() *Journal {
    return @ptrFromInt(@as(usize, @intFromFloat(raw.dlpk_journal())));
}

/// Ends what the call since `count` journaled for its holder (the harness, here), as a JS view
/// that holds it does: the library journals every owner record and struct it hands out.
fn held(count: i32) void {
    journal().count = count;
}

/// An address as the ABI carries it. Values at or above 2^53 round: the library refuses those as
/// impossible addresses (no user space reaches there), which is what the fuzzer expects of them.
fn f(address: usize) f64 {
    return @floatFromInt(address);
}

pub fn dlpk_description_size() u32 {
    return raw.dlpk_description_size();
}
/// `dlpk_import` (the library's general door, which writes this thread's scratch), its description
/// copied to `out_address` as the harnesses read it.
pub fn dlpk_import(managed: usize, options: u32, out_address: usize) i32 {
    const count = journal().count;
    defer held(count);
    const status = raw.dlpk_import(managed, options);
    const scratch: [*]const u8 = @ptrFromInt(@as(usize, @intFromFloat(raw.dlpk_scratch())));
    const out: [*]u8 = @ptrFromInt(out_address);
    const bytes = raw.dlpk_description_size();
    @memcpy(out[0..bytes], scratch[0..bytes]);
    return status;
}
pub fn dlpk_export(options: u32, spec_address: usize) i32 {
    const count = journal().count;
    defer held(count);
    return raw.dlpk_export(options, f(spec_address));
}
pub fn dlpk_managed_delete(managed: usize, versioned: u32) void {
    raw.dlpk_managed_delete(f(managed), versioned);
}
pub fn dlpk_owner_retain(address: usize) void {
    const count = journal().count;
    defer held(count);
    raw.dlpk_owner_retain(f(address));
}
pub fn dlpk_owner_release(address: usize) void {
    raw.dlpk_owner_release(f(address));
}
pub fn dlpk_alloc(bytes: f64, alignment: f64, zero: u32, out_address: usize) i32 {
    const count = journal().count;
    defer held(count);
    return raw.dlpk_alloc(bytes, alignment, zero, f(out_address));
}
pub fn dlpk_stats(out: *[stats_count]f64) u32 {
    return raw.dlpk_stats(f(@intFromPtr(out)));
}
pub fn dlpk_realm_new() usize {
    return @intFromFloat(raw.dlpk_realm_new());
}
pub fn dlpk_pin_new_in(realm: usize, id: f64, bytes: f64, out_address: usize) i32 {
    const count = journal().count;
    defer held(count);
    return raw.dlpk_pin_new(f(realm), id, bytes, f(out_address));
}
pub fn dlpk_pins_drain_in(realm: usize, out: [*]f64, capacity: u32) u32 {
    return raw.dlpk_pins_drain(f(realm), f(@intFromPtr(out)), capacity);
}

pub fn stat(which: Stat) i64 {
    var out: [stats_count]f64 = undefined;
    _ = dlpk_stats(&out);
    return @intFromFloat(out[@intFromEnum(which)]);
}

/// Calls a managed tensor's deleter the way a consumer does.
pub fn consume(managed: usize, versioned: bool) void {
    if (versioned) {
        const m: *Versioned = @ptrFromInt(managed);
        if (m.deleter) |d| d(m);
    } else {
        const m: *Legacy = @ptrFromInt(managed);
        if (m.deleter) |d| d(m);
    }
}
