//! Test support (Linux): fresh pages at addresses nothing in this process used before, for the
//! tests of the memory-map lookups (mappings.zig) and of what asks them (describe.zig, verify.zig,
//! python.zig). Nothing outside tests uses this file.

const std = @import("std");

/// Test support (Linux): `pages` fresh read-write pages at an address nothing in this process
/// used before, so no cache can remember them from an earlier mapping (the one thing it cannot
/// notice is memory unmapped after it remembered it). Unmap with `std.posix.munmap`.
pub fn freshRegion(pages: usize) ![]align(std.heap.page_size_min) u8 {
    const page = std.heap.page_size_min;
    const Hint = struct {
        var next = std.atomic.Value(usize).init(0x3e00_0000_0000);
    };
    const bytes = pages * page;
    // A guard gap between regions, so two of them never merge into one mapping.
    const at = Hint.next.fetchAdd(bytes + 16 * page, .monotonic);
    const region = try std.posix.mmap(
        @ptrFromInt(at),
        bytes,
        std.posix.PROT.READ | std.posix.PROT.WRITE,
        .{ .TYPE = .PRIVATE, .ANONYMOUS = true },
        -1,
        0,
    );
    if (@intFromPtr(region.ptr) != at) {
        std.posix.munmap(region);
        return error.SkipZigTest;
    }
    return region;
}

/// Test support (Linux): `freshRegion(protections.len)`, each page then given its protection
/// (`std.posix.PROT` bits, or `unmapped` for a page unmapped again).
pub fn freshPages(protections: []const u32) ![]align(std.heap.page_size_min) u8 {
    const page = std.heap.page_size_min;
    const region = try freshRegion(protections.len);
    for (protections, 0..) |protection, i| {
        const one: []align(page) u8 = @alignCast(region[i * page .. (i + 1) * page]);
        if (protection == unmapped) {
            std.posix.munmap(one);
        } else if (protection != std.posix.PROT.READ | std.posix.PROT.WRITE) {
            try std.posix.mprotect(one, protection);
        }
    }
    return region;
}

/// A page `freshPages` unmaps (no protection bit is this high).
pub const unmapped: u32 = 1 << 31;
