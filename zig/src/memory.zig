//! Library-owned memory: aligned allocations behind a native owner, and the strided -> contiguous
//! copy used by `copy()`.

const std = @import("std");
const owner_mod = @import("owner.zig");

/// Allocates `bytes` (at least 1, so the address is never NULL) aligned to `alignment` (a power of
/// two, at least the pointer size) inside a new owner. Returns null when out of memory.
pub fn allocate(bytes: usize, alignment: usize, zero: bool) ?*owner_mod.Owner {
    std.debug.assert(std.math.isPowerOfTwo(alignment));
    const size = @max(bytes, 1);
    const ptr = alignedAlloc(size, @max(alignment, @sizeOf(usize))) orelse return null;
    if (zero) @memset(@as([*]u8, @ptrCast(ptr))[0..size], 0);
    return owner_mod.create(.native, @intFromPtr(ptr), bytes) orelse {
        alignedFree(ptr);
        return null;
    };
}

// Windows' C runtime has no posix_memalign, and memory from its _aligned_malloc must go back
// through _aligned_free (plain free would corrupt the heap), so both halves are chosen together.
const windows_crt = @import("builtin").os.tag == .windows;
extern "c" fn _aligned_malloc(size: usize, alignment: usize) ?*anyopaque;
extern "c" fn _aligned_free(ptr: ?*anyopaque) void;

fn alignedAlloc(size: usize, alignment: usize) ?*anyopaque {
    if (windows_crt) return _aligned_malloc(size, alignment);
    var memory: ?*anyopaque = null;
    if (std.c.posix_memalign(&memory, alignment, size) != 0) return null;
    return memory;
}

/// Gives back memory `allocate` obtained (the matching free on every target).
pub fn alignedFree(ptr: ?*anyopaque) void {
    if (windows_crt) _aligned_free(ptr) else std.c.free(ptr);
}

/// Copies a strided tensor (element 0 at `src`, strides in elements) into `dst` in C order.
/// Dimensions are coalesced first so contiguous runs become single memcpys.
pub fn copyStrided(dst: [*]u8, src: [*]const u8, itemsize: usize, shape_in: []const i64, strides_in: []const i64) void {
    var shape: [64]i64 = undefined;
    var strides: [64]i64 = undefined;
    var ndim: usize = 0;
    for (shape_in, strides_in) |extent, stride| {
        if (extent == 0) return;
        if (extent == 1) continue;
        // Merge with the previous (outer) dim when it steps exactly over this one.
        if (ndim > 0 and strides[ndim - 1] == stride * extent) {
            shape[ndim - 1] *= extent;
            strides[ndim - 1] = stride;
            continue;
        }
        shape[ndim] = extent;
        strides[ndim] = stride;
        ndim += 1;
    }
    if (ndim == 0) {
        @memcpy(dst[0..itemsize], src[0..itemsize]);
        return;
    }
    const inner: usize = @intCast(shape[ndim - 1]);
    const inner_stride = strides[ndim - 1] * @as(i64, @intCast(itemsize));
    var index: [64]i64 = [_]i64{0} ** 64;
    var offset: i64 = 0; // bytes from src to the start of the current inner run
    var out: usize = 0;
    const run_bytes = inner * itemsize;
    while (true) {
        const run_src = offsetPtr(src, offset);
        if (inner_stride == @as(i64, @intCast(itemsize))) {
            @memcpy(dst[out .. out + run_bytes], run_src[0..run_bytes]);
        } else {
            copyRun(dst + out, run_src, itemsize, inner, inner_stride);
        }
        out += run_bytes;
        // Odometer over the outer dims.
        var d = ndim - 1;
        while (true) {
            if (d == 0) return;
            d -= 1;
            index[d] += 1;
            offset += strides[d] * @as(i64, @intCast(itemsize));
            if (index[d] < shape[d]) break;
            offset -= shape[d] * strides[d] * @as(i64, @intCast(itemsize));
            index[d] = 0;
        }
    }
}

fn offsetPtr(base: [*]const u8, offset: i64) [*]const u8 {
    const address: usize = @intCast(@as(i64, @intCast(@intFromPtr(base))) + offset);
    return @ptrFromInt(address);
}

fn copyRun(dst: [*]u8, src: [*]const u8, itemsize: usize, count: usize, stride_bytes: i64) void {
    inline for (.{ 1, 2, 4, 8, 16 }) |size| {
        if (itemsize == size) {
            var s = src;
            for (0..count) |k| {
                @memcpy(dst[k * size ..][0..size], s[0..size]);
                s = offsetPtr(s, stride_bytes);
            }
            return;
        }
    }
    var s = src;
    for (0..count) |k| {
        @memcpy(dst[k * itemsize ..][0..itemsize], s[0..itemsize]);
        s = offsetPtr(s, stride_bytes);
    }
}

const testing = std.testing;

test "allocation is aligned, zeroed on request, and freed by its owner" {
    const before = @import("stats.zig").get(.allocations);
    const o = allocate(100, 256, true).?;
    try testing.expectEqual(@as(usize, 0), o.payload % 256);
    const bytes: [*]const u8 = @ptrFromInt(o.payload);
    for (bytes[0..100]) |b| try testing.expectEqual(@as(u8, 0), b);
    owner_mod.release(o);
    try testing.expectEqual(before, @import("stats.zig").get(.allocations));
}

test "strided copy: transposed, negative, broadcast, 0-d" {
    const src = [_]u32{ 0, 1, 2, 3, 4, 5 };
    var dst: [6]u32 = undefined;
    const bytes: [*]u8 = @ptrCast(&dst);
    const s: [*]const u8 = @ptrCast(&src);

    copyStrided(bytes, s, 4, &.{ 3, 2 }, &.{ 1, 3 });
    try testing.expectEqualSlices(u32, &.{ 0, 3, 1, 4, 2, 5 }, &dst);

    copyStrided(bytes, s + 5 * 4, 4, &.{6}, &.{-1});
    try testing.expectEqualSlices(u32, &.{ 5, 4, 3, 2, 1, 0 }, &dst);

    copyStrided(bytes, s, 4, &.{ 3, 2 }, &.{ 0, 1 });
    try testing.expectEqualSlices(u32, &.{ 0, 1, 0, 1, 0, 1 }, &dst);

    copyStrided(bytes, s + 4, 4, &.{}, &.{});
    try testing.expectEqual(@as(u32, 1), dst[0]);

    // C-contiguous with size-1 dims of odd strides: one memcpy.
    copyStrided(bytes, s, 4, &.{ 1, 6, 1 }, &.{ 99, 1, -7 });
    try testing.expectEqualSlices(u32, &src, &dst);

    // 16-byte items (complex128), every other one.
    const wide = [_]u128{ 1, 2, 3, 4 };
    var wide_dst: [2]u128 = undefined;
    copyStrided(@ptrCast(&wide_dst), @ptrCast(&wide), 16, &.{2}, &.{2});
    try testing.expectEqualSlices(u128, &.{ 1, 3 }, &wide_dst);
}
