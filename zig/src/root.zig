//! The C ABI of libdlpack: the only symbols the TS side binds (ffi/symbols.ts lists the same ones).
//! Every function returns a status code or writes into caller-owned memory; nothing here may panic
//! or unwind into the host.

const std = @import("std");
const dlpack = @import("dlpack.zig");
const describe = @import("describe.zig");
const owner = @import("owner.zig");
const stats = @import("stats.zig");

/// Bumped whenever a symbol, a signature or a shared struct layout changes. The TS loader refuses a
/// library whose number differs from its own.
pub const ABI_VERSION: u32 = 1;

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
    if (managed != 0 and !keep) {
        dlpack.deleteManaged(managed, versioned);
        stats.add(.deleters_called, 1);
    }
    return @intFromEnum(status);
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
}
