//! The region holding an address on macOS and Windows (mappings.zig asks Linux itself, and keeps
//! what every platform answered).

const std = @import("std");
const builtin = @import("builtin");
const assert = std.debug.assert;
const regions = @import("regions.zig");

const Error = regions.Error;
const Region = regions.Region;
const perm_read = regions.perm_read;
const perm_write = regions.perm_write;
const perm_exec = regions.perm_exec;

// ---------------------------------------------------------------------------------------------
// macOS: mach_vm_region_recurse, descending into submaps (the shared cache).

/// `vm_region_submap_short_info_data_64_t`: declared under #pragma pack(4), so `offset` is at 12.
const SubmapShortInfo64 = extern struct {
    protection: i32,
    max_protection: i32,
    inheritance: u32,
    offset: u64 align(4),
    user_tag: u32,
    ref_count: u32,
    shadow_depth: u16,
    external_pager: u8,
    share_mode: u8,
    is_submap: i32,
    behavior: i32,
    object_id: u32,
    user_wired_count: u16,
    padding: u16,
};

comptime {
    assert(@offsetOf(SubmapShortInfo64, "offset") == 12);
    assert(@offsetOf(SubmapShortInfo64, "is_submap") == 32);
    assert(@sizeOf(SubmapShortInfo64) == 48);
}

const VM_PROT_READ: i32 = 1;
const VM_PROT_WRITE: i32 = 2;
const VM_PROT_EXECUTE: i32 = 4;

/// The region holding `at`: the map entry at or after it (one level deeper for each submap).
pub fn queryDarwin(at: u64) Error!Region {
    if (builtin.os.tag != .macos) return error.Unavailable;
    const task = std.c.mach_task_self();
    var depth: u32 = 0;
    while (depth < 16) {
        var address: usize = @intCast(at);
        var size: u64 = 0;
        var info: SubmapShortInfo64 = undefined;
        var count: u32 = @sizeOf(SubmapShortInfo64) / @sizeOf(i32);
        const info_out: std.c.vm_region_recurse_info_t = @ptrCast(&info);
        const kern = std.c.mach_vm_region_recurse(task, &address, &size, &depth, info_out, &count);
        // KERN_INVALID_ADDRESS: nothing at or after the address.
        if (kern != 0) return .{ .start = at, .end = std.math.maxInt(u64), .perms = 0 };
        if (address > at) return .{ .start = at, .end = address, .perms = 0 };
        const end = std.math.add(u64, address, size) catch std.math.maxInt(u64);
        if (end <= at) return error.Inconsistent;
        if (info.is_submap != 0) {
            depth += 1;
            continue;
        }
        var perms: u64 = 0;
        if (info.protection & VM_PROT_READ != 0) perms |= perm_read;
        if (info.protection & VM_PROT_WRITE != 0) perms |= perm_write;
        if (info.protection & VM_PROT_EXECUTE != 0) perms |= perm_exec;
        return .{ .start = address, .end = end, .perms = perms };
    }
    return error.Inconsistent;
}

// ---------------------------------------------------------------------------------------------
// Windows: VirtualQuery.

pub fn queryWindows(at: u64) Error!Region {
    if (builtin.os.tag != .windows) return error.Unavailable;
    const w = std.os.windows;
    const readable_protections: u32 = 0x02 | 0x04 | 0x08 | 0x20 | 0x40 | 0x80;
    const writable_protections: u32 = 0x04 | 0x08 | 0x40 | 0x80;
    const executable_protections: u32 = 0x10 | 0x20 | 0x40 | 0x80;
    var info: w.MEMORY_BASIC_INFORMATION = undefined;
    const info_bytes = @sizeOf(w.MEMORY_BASIC_INFORMATION);
    if (w.kernel32.VirtualQuery(@ptrFromInt(@as(usize, @intCast(at))), &info, info_bytes) == 0) {
        return .{ .start = at, .end = std.math.maxInt(u64), .perms = 0 };
    }
    const base: u64 = @intFromPtr(info.BaseAddress);
    const end = std.math.add(u64, base, info.RegionSize) catch std.math.maxInt(u64);
    if (base > at or end <= at) return error.Inconsistent;
    const protect: u32 = info.Protect;
    var perms: u64 = 0;
    if (info.State == w.MEM_COMMIT and protect & (w.PAGE_NOACCESS | w.PAGE_GUARD) == 0) {
        if (protect & readable_protections != 0) perms |= perm_read;
        if (protect & writable_protections != 0) perms |= perm_write;
        if (protect & executable_protections != 0) perms |= perm_exec;
    }
    return .{ .start = base, .end = end, .perms = perms };
}
