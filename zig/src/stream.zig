//! Non-temporal (streaming) stores for the copy kernels (memory.zig's `copyStrided`, the
//! transposes of transpose.zig): a big copy's output goes to memory through the write-combining
//! buffers, whole cache lines at a time, without first reading each line into the cache it would
//! then evict. Below `bytes_min` the output still fits the caches and ordinary stores win.

const std = @import("std");
const builtin = @import("builtin");
const assert = std.debug.assert;

pub const cache_line_bytes = 64;

/// Copies whose output is at least this big stream it. Measured on a 2-core AMD EPYC VM (32 MiB
/// L3, shared with other tenants; thread CPU time, interleaved, medians): a contiguous copy of 4
/// MiB streamed ran at 18 against 20 GB/s for memcpy, of 6 MiB 19 against 15, of 8 MiB 16 against
/// 9, of 64 MiB 6.2 against 4.7 (memory shared with a loaded host); a float32 transpose of 7 MiB
/// 4.7 against 5.1 GB/s, of 16 MiB 4.3 against 2.6, of 31 MiB 6.8 against 3.0. An earlier
/// transpose kernel on an Intel Xeon VM gained only from 40 MiB: hosts with a larger last-level
/// cache keep more of the output there.
pub const bytes_min: usize = 8 << 20;

/// Non-temporal stores need inline assembly that only the LLVM backend assembles (Zig's own x86
/// backend, used for Debug builds, does not know the instructions); elsewhere plain stores.
pub const available = builtin.cpu.arch == .x86_64 and builtin.zig_backend == .stage2_llvm;
const has_avx = builtin.cpu.arch == .x86_64 and
    std.Target.x86.featureSetHas(builtin.cpu.features, .avx);

/// Whether a copy writing `bytes` in all streams its output.
pub fn worthwhile(bytes: usize) bool {
    return available and bytes >= bytes_min;
}

/// Writes one whole cache line at `dst` (aligned to a line) with non-temporal stores, from 64
/// bytes at `src` (any alignment).
pub fn line(dst: [*]u8, src: *align(1) const [cache_line_bytes]u8) void {
    if (comptime !available) unreachable;
    assert(@intFromPtr(dst) % cache_line_bytes == 0);
    const width = if (has_avx) 32 else 16;
    const V = @Vector(width / 8, u64);
    inline for (0..cache_line_bytes / width) |k| {
        const value: V = @bitCast(src[k * width ..][0..width].*);
        const to = dst + k * width;
        if (has_avx) {
            asm volatile ("vmovntdq %[value], (%[to])"
                :
                : [value] "x" (value),
                  [to] "r" (to),
                : .{ .memory = true });
        } else {
            asm volatile ("movntdq %[value], (%[to])"
                :
                : [value] "x" (value),
                  [to] "r" (to),
                : .{ .memory = true });
        }
    }
}

/// Orders the streamed stores before anything after the copy (they are weakly ordered); a copy
/// that streamed calls it once at its end.
pub fn fence() void {
    if (comptime !available) unreachable;
    asm volatile ("sfence" ::: .{ .memory = true });
}

/// Copies `bytes` from `src` to `dst` (not overlapping), the whole cache lines of the output
/// with non-temporal stores and the partial lines at either end with plain ones. The caller
/// fences once its whole copy is done.
pub fn copy(dst: [*]u8, src: [*]const u8, bytes: usize) void {
    @setRuntimeSafety(false); // addresses inside the ranges the caller validated
    if (comptime !available) unreachable;
    const head = @min(bytes, (cache_line_bytes - @intFromPtr(dst) % cache_line_bytes) %
        cache_line_bytes);
    @memcpy(dst[0..head], src[0..head]);
    const lines = (bytes - head) / cache_line_bytes;
    var at = head;
    for (0..lines) |_| {
        line(dst + at, src[at..][0..cache_line_bytes]);
        at += cache_line_bytes;
    }
    @memcpy(dst[at..bytes], src[at..bytes]);
}

const testing = std.testing;

test "streamed copy: every start and end within a line, sizes around a line" {
    if (!available) return error.SkipZigTest;
    const span = 5 * cache_line_bytes;
    const src = try testing.allocator.alignedAlloc(u8, .@"64", span + cache_line_bytes);
    defer testing.allocator.free(src);
    for (src, 0..) |*b, k| b.* = @truncate(k *% 37 +% k / 253);
    const dst = try testing.allocator.alignedAlloc(u8, .@"64", span + 2 * cache_line_bytes);
    defer testing.allocator.free(dst);
    for (0..cache_line_bytes) |shift| for (0..span) |bytes| {
        @memset(dst, 0xA5);
        const from = (shift * 7) % cache_line_bytes;
        copy(dst.ptr + shift, src.ptr + from, bytes);
        fence();
        try testing.expectEqualSlices(u8, src[from..][0..bytes], dst[shift..][0..bytes]);
        for (dst[0..shift]) |b| try testing.expectEqual(@as(u8, 0xA5), b);
        for (dst[shift + bytes ..]) |b| try testing.expectEqual(@as(u8, 0xA5), b);
    };
}

test "streaming threshold" {
    try testing.expect(!worthwhile(bytes_min - 1));
    try testing.expectEqual(available, worthwhile(bytes_min));
}
