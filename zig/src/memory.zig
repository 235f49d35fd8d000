//! Library-owned memory: aligned allocations (an owner record in owner.zig holds each one), and
//! the strided -> contiguous copy used by `copy()`.

const std = @import("std");
const builtin = @import("builtin");
const assert = std.debug.assert;
const abi = @import("abi.zig");
const dlpack = @import("dlpack.zig");
const stream = @import("stream.zig");
const transpose = @import("transpose.zig");

// ---------------------------------------------------------------------------------------------
// Records (owners, exports, wrappers): the C heap through `std.heap.raw_c_allocator`, with error
// unions. Raw calls: the safe-build fill of new and of freed memory would cost the import and
// export paths a memset each, and every field of a record is written right after `create`.

/// A record of type `T`, its fields not yet written. Give it back with `destroy`.
pub fn create(comptime T: type) error{OutOfMemory}!*T {
    comptime assert(@alignOf(T) <= @alignOf(std.c.max_align_t));
    const allocator = std.heap.raw_c_allocator;
    const bytes = allocator.rawAlloc(@sizeOf(T), .of(T), @returnAddress()) orelse
        return error.OutOfMemory;
    return @ptrCast(@alignCast(bytes));
}

pub fn destroy(record: anytype) void {
    const T = @typeInfo(@TypeOf(record)).pointer.child;
    const bytes: [*]u8 = @ptrCast(record);
    std.heap.raw_c_allocator.rawFree(bytes[0..@sizeOf(T)], .of(T), @returnAddress());
}

/// `len` bytes for a record of variable size aligned like `T`. Give them back with `destroyBytes`.
pub fn createBytes(comptime T: type, len: usize) error{OutOfMemory}![]align(@alignOf(T)) u8 {
    comptime assert(@alignOf(T) <= @alignOf(std.c.max_align_t));
    assert(len >= @sizeOf(T));
    const allocator = std.heap.raw_c_allocator;
    const bytes = allocator.rawAlloc(len, .of(T), @returnAddress()) orelse return error.OutOfMemory;
    const aligned: [*]align(@alignOf(T)) u8 = @alignCast(bytes);
    return aligned[0..len];
}

pub fn destroyBytes(comptime T: type, bytes: []align(@alignOf(T)) u8) void {
    std.heap.raw_c_allocator.rawFree(bytes, .of(T), @returnAddress());
}

// ---------------------------------------------------------------------------------------------
// Tensor memory

/// The largest alignment `alloc` takes (`dlpk_alloc` refuses larger ones).
pub const alignment_max_bytes: usize = 1 << 20;

/// Allocates `bytes` (at least 1, so the address is never NULL) aligned to `alignment` (a power of
/// two up to `alignment_max_bytes`; at least the pointer size is used). Give it back with `free`.
pub fn alloc(bytes: usize, alignment: usize, zero: bool) error{OutOfMemory}![*]u8 {
    assert(std.math.isPowerOfTwo(alignment));
    assert(alignment <= alignment_max_bytes);
    const size = @max(bytes, 1);
    const aligned_to = @max(alignment, @sizeOf(usize));
    const ptr = alignedAlloc(size, aligned_to) orelse return error.OutOfMemory;
    assert(@intFromPtr(ptr) % aligned_to == 0);
    adviseHugePages(ptr, size);
    const memory: [*]u8 = @ptrCast(ptr);
    if (zero) @memset(memory[0..size], 0);
    return memory;
}

/// Gives back memory `alloc` obtained (the matching free on every target).
pub fn free(memory: [*]u8) void {
    if (windows_crt) _aligned_free(memory) else std.c.free(memory);
}

/// Allocations from this size up ask Linux for transparent huge pages, as numpy does for its
/// arrays: the first touch then faults 2 MiB at a time instead of 4 KiB (on a VM each fault is
/// microseconds), and strided copies over the memory miss the TLB far less.
const huge_page_advice_bytes_min = 4 << 20;

fn adviseHugePages(ptr: *anyopaque, size: usize) void {
    if (builtin.os.tag != .linux or size < huge_page_advice_bytes_min) return;
    const page = std.heap.pageSize();
    const start = std.mem.alignForward(usize, @intFromPtr(ptr), page);
    const end = std.mem.alignBackward(usize, @intFromPtr(ptr) + size, page);
    if (end <= start) return;
    // Advice only: a kernel without THP (or with it disabled) answers EINVAL and nothing changes.
    _ = std.os.linux.madvise(@ptrFromInt(start), end - start, std.os.linux.MADV.HUGEPAGE);
}

// Windows' C runtime has no posix_memalign, and memory from its _aligned_malloc must go back
// through _aligned_free (plain free would corrupt the heap), so both halves are chosen together.
const windows_crt = builtin.os.tag == .windows;
extern "c" fn _aligned_malloc(size: usize, alignment: usize) ?*anyopaque;
extern "c" fn _aligned_free(ptr: ?*anyopaque) void;

fn alignedAlloc(size: usize, alignment: usize) ?*anyopaque {
    assert(size > 0);
    if (windows_crt) return _aligned_malloc(size, alignment);
    var memory: ?*anyopaque = null;
    if (std.c.posix_memalign(&memory, alignment, size) != 0) return null;
    return memory;
}

/// A strided layout with its extent-1 dims dropped and every dim merged into the one outside it
/// when that one steps exactly over it.
const Coalesced = struct {
    shape: [dlpack.rank_max]i64,
    strides: [dlpack.rank_max]i64,
    ndim: usize,
    empty: bool,
};

fn coalesce(shape_in: []const i64, strides_in: []const i64) Coalesced {
    var c: Coalesced = .{ .shape = undefined, .strides = undefined, .ndim = 0, .empty = false };
    for (shape_in, strides_in) |extent, stride| {
        assert(extent >= 0);
        if (extent == 0) {
            c.empty = true;
            return c;
        }
        if (extent == 1) continue;
        const step = @mulWithOverflow(stride, extent);
        if (c.ndim > 0 and step[1] == 0 and c.strides[c.ndim - 1] == step[0]) {
            c.shape[c.ndim - 1] *= extent;
            c.strides[c.ndim - 1] = stride;
            continue;
        }
        c.shape[c.ndim] = extent;
        c.strides[c.ndim] = stride;
        c.ndim += 1;
    }
    assert(c.ndim <= shape_in.len);
    return c;
}

/// Copies a strided tensor (element 0 at `src`, strides in elements) into `dst` in C order.
/// Dimensions are coalesced first so contiguous runs become single memcpys. A copy of at least
/// `stream.bytes_min` streams its output past the caches where the target can. The caller checked
/// the layout: extents are not negative and at most 2^53 elements in all, every element lies in
/// memory it may read, and `dst` does not overlap the source.
pub fn copyStrided(
    dst: [*]u8,
    src: [*]const u8,
    itemsize: usize,
    shape_in: []const i64,
    strides_in: []const i64,
) void {
    assert(shape_in.len == strides_in.len);
    assert(shape_in.len <= dlpack.rank_max);
    assert(itemsize > 0);
    const c = coalesce(shape_in, strides_in);
    if (c.empty) return;
    if (c.ndim == 0) {
        @memcpy(dst[0..itemsize], src[0..itemsize]);
        return;
    }
    const ndim = c.ndim;
    const item: i64 = @intCast(itemsize);
    var elements: usize = 1;
    for (c.shape[0..ndim]) |extent| elements *= @intCast(extent);
    // A strided innermost dimension (a transpose, a column slice) is copied in square tiles of the
    // last two dims, so every cache line read serves several rows of the output.
    const inner_jump = @abs(c.strides[ndim - 1]) * itemsize;
    const tiled = ndim >= 2 and transpose.supports(itemsize) and
        inner_jump > transpose.cache_line_bytes and
        @abs(c.strides[ndim - 2]) < @abs(c.strides[ndim - 1]);
    const kernel: Kernel = .{
        .tiled = tiled,
        .streaming = stream.worthwhile(elements * itemsize),
        .itemsize = itemsize,
        .rows = if (tiled) @intCast(c.shape[ndim - 2]) else 1,
        .cols = @intCast(c.shape[ndim - 1]),
        .row_stride_bytes = if (tiled) c.strides[ndim - 2] * item else 0,
        .col_stride_bytes = c.strides[ndim - 1] * item,
    };
    const outer = ndim - @as(usize, if (tiled) 2 else 1);
    var index = [_]i64{0} ** dlpack.rank_max;
    var offset: i64 = 0; // bytes from src to the start of the current block
    var out: usize = 0;
    while (true) {
        kernel.copy(dst + out, offsetPtr(src, offset));
        out += kernel.blockBytes();
        // Odometer over the dims outside the kernel.
        var d = outer;
        while (true) {
            if (d == 0) {
                if (kernel.streaming) stream.fence();
                return;
            }
            d -= 1;
            index[d] += 1;
            offset += c.strides[d] * item;
            if (index[d] < c.shape[d]) break;
            offset -= c.shape[d] * c.strides[d] * item;
            index[d] = 0;
        }
    }
}

/// What one step of the odometer copies: a tile of the last two dims, or a run of the last one.
const Kernel = struct {
    tiled: bool,
    /// The output streams past the caches (the copy fences once at its end).
    streaming: bool,
    itemsize: usize,
    rows: usize,
    cols: usize,
    row_stride_bytes: i64,
    col_stride_bytes: i64,

    fn blockBytes(self: Kernel) usize {
        return self.rows * self.cols * self.itemsize;
    }

    fn copy(self: Kernel, dst: [*]u8, src: [*]const u8) void {
        assert(self.rows > 0 and self.cols > 0);
        if (self.tiled) {
            transpose.copyBlock(.{
                .dst = dst,
                .pitch = self.cols,
                .src = src,
                .rows = self.rows,
                .cols = self.cols,
                .row_stride_bytes = self.row_stride_bytes,
                .col_stride_bytes = self.col_stride_bytes,
            }, self.itemsize, self.streaming);
        } else if (self.col_stride_bytes == @as(i64, @intCast(self.itemsize))) {
            const bytes = self.blockBytes();
            if (self.streaming) {
                stream.copy(dst, src, bytes);
            } else {
                copyBytes(dst, src, bytes);
            }
        } else if (self.streaming) {
            copyRunStreamed(dst, src, self.itemsize, self.cols, self.col_stride_bytes);
        } else {
            copyRun(dst, src, self.itemsize, self.cols, self.col_stride_bytes);
        }
    }
};

/// glibc's `mempcpy` under its exported alias: `@memcpy` calls the memcpy of Zig's compiler_rt,
/// linked into the library (a plain 32-byte vector loop), and LLVM turns a call to `mempcpy` back
/// into one; this name it leaves alone. glibc's copy is chosen for the CPU at load time (`rep
/// movsb` on this size where the CPU copies fast that way).
extern "c" fn __mempcpy(dst: [*]u8, src: [*]const u8, bytes: usize) [*]u8;
const glibc = builtin.os.tag == .linux and builtin.abi.isGnu() and builtin.link_libc;

/// A contiguous copy below the streaming size. 1 MiB into a touched 1 MiB (Intel Xeon VM, AVX-512,
/// 2 MiB L2; thread CPU time, interleaved, medians): 38.4 us through compiler_rt's memcpy, 35.9
/// through glibc's, 35.6 for glibc's called directly.
fn copyBytes(dst: [*]u8, src: [*]const u8, bytes: usize) void {
    if (glibc) {
        _ = __mempcpy(dst, src, bytes);
    } else {
        @memcpy(dst[0..bytes], src[0..bytes]);
    }
}

fn offsetPtr(base: [*]const u8, offset: i64) [*]const u8 {
    const address: usize = @intCast(@as(i64, @intCast(@intFromPtr(base))) + offset);
    return @ptrFromInt(address);
}

/// Not inlined (nor `copyRunStreamed`): inlined, LLVM hoists the set-up of their vectorised
/// gathers (512-bit multiplies where the target has AVX-512) to the top of `copyStrided`, where
/// every copy ran it, and on that Intel VM a 1 MiB contiguous copy right after ran 40 instead of
/// 38.4 us (the same memcpy, so most likely the core clocked down for the wide multiplies; the
/// clock was not read). A call per run costs nothing measurable: 262144 runs of 4 float32 took
/// 432 us either way.
noinline fn copyRun(
    dst: [*]u8,
    src: [*]const u8,
    itemsize: usize,
    count: usize,
    stride_bytes: i64,
) void {
    @setRuntimeSafety(false); // addresses inside the validated span
    const step: usize = @bitCast(@as(isize, @intCast(stride_bytes)));
    inline for (.{ 1, 2, 4, 8, 16 }) |size| {
        if (itemsize == size) {
            const T = std.meta.Int(.unsigned, size * 8);
            const out: [*]align(1) T = @ptrCast(dst);
            var at = @intFromPtr(src);
            for (0..count) |k| {
                out[k] = @as(*align(1) const T, @ptrFromInt(at)).*;
                at +%= step;
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

/// `copyRun` with the whole cache lines of the output gathered a line at a time and streamed;
/// the partial lines at either end (and runs whose items do not meet the lines) stored plainly.
noinline fn copyRunStreamed(
    dst: [*]u8,
    src: [*]const u8,
    itemsize: usize,
    count: usize,
    stride_bytes: i64,
) void {
    const line_bytes = stream.cache_line_bytes;
    const head_bytes = (line_bytes - @intFromPtr(dst) % line_bytes) % line_bytes;
    inline for (.{ 1, 2, 4, 8, 16 }) |size| {
        if (itemsize == size and head_bytes % size == 0) {
            return streamRun(size, dst, src, count, stride_bytes, head_bytes / size);
        }
    }
    copyRun(dst, src, itemsize, count, stride_bytes);
}

fn streamRun(
    comptime size: usize,
    dst: [*]u8,
    src: [*]const u8,
    count: usize,
    stride_bytes: i64,
    head_items: usize,
) void {
    @setRuntimeSafety(false); // addresses inside the validated span
    const T = std.meta.Int(.unsigned, size * 8);
    const per_line = stream.cache_line_bytes / size;
    const head = @min(count, head_items);
    const lines = (count - head) / per_line;
    const tail = count - head - lines * per_line;
    copyRun(dst, src, size, head, stride_bytes);
    const step: usize = @bitCast(@as(isize, @intCast(stride_bytes)));
    var at = @intFromPtr(src) +% head *% step;
    var to = dst + head * size;
    for (0..lines) |k| {
        var line: [per_line]T align(stream.cache_line_bytes) = undefined;
        // Every other item (real parts, one channel of two): two lines' worth read as one vector
        // and the even items picked by a shuffle, where the odd item it reads past the line's
        // last one lies before an item of the run (the run's last item may end the memory).
        if (step == 2 * size and (k + 1 < lines or tail > 0)) {
            const pair = @as(*align(1) const @Vector(2 * per_line, T), @ptrFromInt(at)).*;
            line = @shuffle(T, pair, undefined, evenLanes(per_line));
            at +%= 2 * stream.cache_line_bytes;
        } else for (&line) |*item| {
            item.* = @as(*align(1) const T, @ptrFromInt(at)).*;
            at +%= step;
        }
        stream.line(to, @ptrCast(&line));
        to += stream.cache_line_bytes;
    }
    copyRun(to, @ptrFromInt(at), size, tail, stride_bytes);
}

fn evenLanes(comptime n: usize) @Vector(n, i32) {
    var lanes: [n]i32 = undefined;
    for (&lanes, 0..) |*lane, k| lane.* = @intCast(2 * k);
    return lanes;
}

const testing = std.testing;

/// The shape and strides of a description as integers (`copyDescribed`): extents not negative,
/// every value exact; a refusal status otherwise.
const Layout = struct {
    ndim: usize,
    shape: [dlpack.rank_max]i64,
    strides: [dlpack.rank_max]i64,
};

fn layoutOf(spec: *const abi.Description, layout: *Layout) ?abi.Status {
    if (spec.ndim < 0 or spec.ndim > dlpack.rank_max) return .rank;
    layout.ndim = @intCast(spec.ndim);
    return dimsOf(spec, layout.shape[0..layout.ndim], layout.strides[0..layout.ndim]);
}

/// Decodes the description's first `shape.len` extents and strides into `shape` and `strides`
/// (an export's record takes them straight from here).
pub fn dimsOf(spec: *const abi.Description, shape: []i64, strides: []i64) ?abi.Status {
    assert(shape.len == strides.len and shape.len <= dlpack.rank_max);
    for (shape, strides, 0..) |*extent_out, *stride_out, d| {
        const extent = abi.integerFromF64(spec.shape[d]) orelse return .shape;
        if (extent < 0) return .shape;
        extent_out.* = extent;
        stride_out.* = abi.integerFromF64(spec.strides[d]) orelse return .strides;
    }
    return null;
}

/// Copies the strided tensor `spec` describes (address, ndim, shape, strides) into `dst` in C
/// order, `itemsize` bytes per element (`dlpk_copy`).
pub fn copyDescribed(spec: *const abi.Description, dst: usize, itemsize: u32) abi.Status {
    if (spec.ndim < 0 or spec.ndim > dlpack.rank_max or itemsize == 0 or dst == 0) {
        return .invalid_argument;
    }
    var layout: Layout = undefined;
    if (layoutOf(spec, &layout)) |refused| return refused;
    // The copy engine assumes at most 2^53 elements (what any view can hold).
    var elements: u64 = 1;
    for (layout.shape[0..layout.ndim]) |extent| {
        elements = std.math.mul(u64, elements, @intCast(extent)) catch return .overflow;
    }
    if (elements > abi.exact_max) return .overflow;
    const src = spec.address();
    const shape = layout.shape[0..layout.ndim];
    const strides = layout.strides[0..layout.ndim];
    copyStrided(@ptrFromInt(dst), @ptrFromInt(src), itemsize, shape, strides);
    return .ok;
}

/// The scalar of type `load` at `address` (any alignment) as an f64, which holds every value of
/// each of those types exactly. The caller guarantees the bytes are readable.
pub fn loadScalar(address: usize, load: abi.Load) f64 {
    assert(address >= abi.address_min and address < abi.address_limit);
    return switch (load) {
        .u8 => @floatFromInt(loaded(u8, address)),
        .i8 => @floatFromInt(loaded(i8, address)),
        .u16 => @floatFromInt(loaded(u16, address)),
        .i16 => @floatFromInt(loaded(i16, address)),
        .u32 => @floatFromInt(loaded(u32, address)),
        .i32 => @floatFromInt(loaded(i32, address)),
        .f32 => @floatCast(loaded(f32, address)),
        .f64 => loaded(f64, address),
    };
}

/// Copies one element of `bytes` bytes (1-16) from `src` to `dst`, any alignment, byte by byte
/// (defined even if the two overlapped).
pub fn storeElement(dst: usize, src: usize, bytes: u32) void {
    assert(bytes >= 1 and bytes <= element_bytes_max);
    assert(dst >= abi.address_min and src >= abi.address_min);
    const to: [*]u8 = @ptrFromInt(dst);
    const from: [*]const u8 = @ptrFromInt(src);
    for (0..bytes) |i| to[i] = from[i];
}

/// The widest element: a complex128.
pub const element_bytes_max = 16;

inline fn loaded(comptime T: type, address: usize) T {
    const at: *align(1) const T = @ptrFromInt(address);
    return at.*;
}

test "element stores of every width, unaligned" {
    var src: [17]u8 = undefined;
    for (&src, 0..) |*b, i| b.* = @intCast(i + 1);
    for (1..element_bytes_max + 1) |n| {
        var dst = [_]u8{0} ** 18;
        storeElement(@intFromPtr(&dst) + 1, @intFromPtr(&src) + 1, @intCast(n));
        try std.testing.expectEqual(@as(u8, 0), dst[0]);
        try std.testing.expectEqualSlices(u8, src[1..][0..n], dst[1..][0..n]);
        try std.testing.expectEqual(@as(u8, 0), dst[1 + n]);
    }
}

test "scalar loads of every type, at unaligned addresses" {
    var bytes: [16]u8 align(8) = undefined;
    const at = @intFromPtr(&bytes) + 1;
    const values = [_]struct { abi.Load, []const u8, f64 }{
        .{ .u8, &.{0xfe}, 254 },
        .{ .i8, &.{0xfe}, -2 },
        .{ .u16, &std.mem.toBytes(@as(u16, 65_000)), 65_000 },
        .{ .i16, &std.mem.toBytes(@as(i16, -30_000)), -30_000 },
        .{ .u32, &std.mem.toBytes(@as(u32, 4_000_000_000)), 4_000_000_000 },
        .{ .i32, &std.mem.toBytes(@as(i32, -2_000_000_000)), -2_000_000_000 },
        .{ .f32, &std.mem.toBytes(@as(f32, -1.5)), -1.5 },
        .{ .f64, &std.mem.toBytes(@as(f64, 1e300)), 1e300 },
    };
    for (values) |v| {
        @memcpy(bytes[1..][0..v[1].len], v[1]);
        try std.testing.expectEqual(v[2], loadScalar(at, v[0]));
    }
    @memcpy(bytes[1..5], &std.mem.toBytes(std.math.nan(f32)));
    try std.testing.expect(std.math.isNan(loadScalar(at, .f32)));
}

test "allocation is aligned and zeroed on request" {
    for ([_]usize{ 1, 8, 256, alignment_max_bytes }) |alignment| {
        const memory = try alloc(100, alignment, true);
        defer free(memory);
        try testing.expectEqual(@as(usize, 0), @intFromPtr(memory) % alignment);
        for (memory[0..100]) |b| try testing.expectEqual(@as(u8, 0), b);
    }
    // Zero bytes still make an address (never NULL).
    free(try alloc(0, 64, false));
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

    // A 3-D tensor whose inner two dims are transposed: tiled kernel inside the outer odometer.
    var cube: [2 * 3 * 4]u16 = undefined;
    for (&cube, 0..) |*v, k| v.* = @intCast(k);
    var cube_dst: [2 * 4 * 3]u16 = undefined;
    copyStrided(@ptrCast(&cube_dst), @ptrCast(&cube), 2, &.{ 2, 4, 3 }, &.{ 12, 1, 4 });
    for (0..2) |a| for (0..4) |b| for (0..3) |c| {
        try testing.expectEqual(cube[a * 12 + c * 4 + b], cube_dst[a * 12 + b * 3 + c]);
    };

    // Bigger than a tile in both directions, negative column stride.
    const n = 70;
    var big: [n * n]u32 = undefined;
    for (&big, 0..) |*v, k| v.* = @intCast(k);
    var big_dst: [n * n]u32 = undefined;
    copyStrided(@ptrCast(&big_dst), @ptrCast(&big[n - 1]), 4, &.{ n, n }, &.{ n, -1 });
    for (0..n) |i| for (0..n) |j| try testing.expectEqual(
        big[i * n + (n - 1 - j)],
        big_dst[i * n + j],
    );

    // 16-byte items (complex128), every other one.
    const wide = [_]u128{ 1, 2, 3, 4 };
    var wide_dst: [2]u128 = undefined;
    copyStrided(@ptrCast(&wide_dst), @ptrCast(&wide), 16, &.{2}, &.{2});
    try testing.expectEqualSlices(u128, &.{ 1, 3 }, &wide_dst);
}

test "strided copy: tiled transposes of every item size match element-by-element copies" {
    // Shapes on both sides of a tile's width, positive and negative strides, gaps between rows.
    const shapes = [_][2]usize{
        .{ 37, 70 }, .{ 70, 37 },  .{ 1, 100 },    .{ 100, 3 },
        .{ 64, 64 }, .{ 129, 17 }, .{ 300, 1030 },
    };
    inline for (.{ 1, 2, 4, 8, 16 }) |size| {
        const steps = [_]i64{ 1, 2, -1 };
        for (shapes) |shape| for (steps) |step| for ([_]bool{ false, true }) |flip_cols| {
            const rows = shape[0];
            const cols = shape[1];
            // Source: a rows_src x cols column-major grid, read transposed (row stride `step`).
            const span_rows = rows * @abs(step);
            const src = try testing.allocator.alloc(u8, span_rows * cols * size);
            defer testing.allocator.free(src);
            for (src, 0..) |*b, k| b.* = @truncate(k *% 31 +% k / 251);
            const dst = try testing.allocator.alloc(u8, rows * cols * size);
            defer testing.allocator.free(dst);
            const row_stride: i64 = step;
            const col_stride: i64 = @intCast(span_rows);
            var origin: i64 = if (step < 0) @intCast(span_rows - 1) else 0;
            var cs = col_stride;
            if (flip_cols) {
                origin += col_stride * @as(i64, @intCast(cols - 1));
                cs = -col_stride;
            }
            const item: i64 = size;
            copyStrided(
                dst.ptr,
                src.ptr + @as(usize, @intCast(origin * item)),
                size,
                &.{ @intCast(rows), @intCast(cols) },
                &.{ row_stride, cs },
            );
            for (0..rows) |i| for (0..cols) |j| {
                const element = origin + @as(i64, @intCast(i)) * row_stride +
                    @as(i64, @intCast(j)) * cs;
                const at: usize = @intCast(element * item);
                const want = src[at..][0..size];
                const got = dst[(i * cols + j) * size ..][0..size];
                try testing.expectEqualSlices(u8, want, got);
            };
        };
    }
}

test "streamed strided runs: every item size and output alignment, ragged ends" {
    if (!stream.available) return error.SkipZigTest;
    const count = 300;
    inline for (.{ 1, 2, 4, 8, 16 }) |size| {
        const src = try testing.allocator.alloc(u8, 2 * count * size);
        defer testing.allocator.free(src);
        for (src, 0..) |*b, k| b.* = @truncate(k *% 29 +% k / 251);
        const dst = try testing.allocator.alignedAlloc(u8, .@"64", count * size + 128);
        defer testing.allocator.free(dst);
        const want = try testing.allocator.alloc(u8, count * size);
        defer testing.allocator.free(want);
        for (0..count) |k| @memcpy(want[k * size ..][0..size], src[2 * k * size ..][0..size]);
        for ([_]usize{ 0, 1, size, 64 - size, 64 }) |shift| for ([_]usize{ 0, 5, 17, count }) |n| {
            @memset(dst, 0xA5);
            copyRunStreamed(dst.ptr + shift, src.ptr, size, n, 2 * size);
            stream.fence();
            try testing.expectEqualSlices(u8, want[0 .. n * size], dst[shift..][0 .. n * size]);
            for (dst[0..shift]) |b| try testing.expectEqual(@as(u8, 0xA5), b);
            for (dst[shift + n * size ..]) |b| try testing.expectEqual(@as(u8, 0xA5), b);
        };
    }
}

test "streamed every-other runs read nothing past the run's last item" {
    // The source's last item ends a page whose successor is not readable: a read past it faults.
    if (!stream.available or builtin.os.tag != .linux) return error.SkipZigTest;
    const page = std.heap.pageSize();
    const region = try std.posix.mmap(
        null,
        2 * page,
        std.posix.PROT.READ | std.posix.PROT.WRITE,
        .{ .TYPE = .PRIVATE, .ANONYMOUS = true },
        -1,
        0,
    );
    defer std.posix.munmap(region);
    try std.posix.mprotect(@alignCast(region[page..]), std.posix.PROT.NONE);
    for (region[0..page], 0..) |*b, k| b.* = @truncate(k *% 13);
    var dst: [page]u8 align(64) = undefined;
    inline for (.{ 1, 2, 4, 8, 16 }) |size| {
        for ([_]usize{ 64 / size, 2 * 64 / size, 3 * 64 / size + 1 }) |count| {
            const first = page - (2 * count - 1) * size;
            copyRunStreamed(&dst, region.ptr + first, size, count, 2 * size);
            stream.fence();
            for (0..count) |k| {
                const from = region[first + 2 * k * size ..][0..size];
                try testing.expectEqualSlices(u8, from, dst[k * size ..][0..size]);
            }
        }
    }
}

test "copies around the streaming threshold: contiguous and strided, aligned or not" {
    const bytes_min = stream.bytes_min;
    const src = try testing.allocator.alignedAlloc(u8, .@"64", 2 * bytes_min + 256);
    defer testing.allocator.free(src);
    for (src, 0..) |*b, k| b.* = @truncate(k *% 131 +% k / 509);
    const dst = try testing.allocator.alignedAlloc(u8, .@"64", bytes_min + 256);
    defer testing.allocator.free(dst);
    for ([_]usize{ bytes_min - 1, bytes_min, bytes_min + 100 }) |bytes| {
        for ([_]usize{ 0, 3 }) |shift| {
            @memset(dst, 0xA5);
            copyStrided(dst.ptr + shift, src.ptr + 1, 1, &.{@intCast(bytes)}, &.{1});
            try testing.expectEqualSlices(u8, src[1..][0..bytes], dst[shift..][0..bytes]);
            try testing.expectEqual(@as(u8, 0xA5), dst[shift + bytes]);
        }
    }
    // Every other float32, the output just over the threshold, item-aligned and not line-aligned.
    const count = bytes_min / 4 + 9;
    const want = try testing.allocator.alloc(u32, count);
    defer testing.allocator.free(want);
    const words: [*]align(1) const u32 = @ptrCast(src.ptr);
    for (want, 0..) |*w, k| w.* = words[2 * k];
    for ([_]usize{ 0, 4 }) |shift| {
        @memset(dst, 0xA5);
        copyStrided(dst.ptr + shift, src.ptr, 4, &.{@intCast(count)}, &.{2});
        const got = dst[shift..][0 .. 4 * count];
        try testing.expectEqualSlices(u8, std.mem.sliceAsBytes(want), got);
        try testing.expectEqual(@as(u8, 0xA5), dst[shift + 4 * count]);
    }
}

/// The element-by-element reference: an odometer over every dim, one item at a time.
fn copyReference(
    dst: []u8,
    src: [*]const u8,
    itemsize: usize,
    shape: []const i64,
    strides: []const i64,
) void {
    assert(shape.len == strides.len and shape.len <= dlpack.rank_max);
    var index = [_]i64{0} ** dlpack.rank_max;
    var out: usize = 0;
    for (shape) |extent| if (extent == 0) return;
    while (true) {
        var element: i64 = 0;
        for (shape, 0..) |_, d| element += index[d] * strides[d];
        const at = offsetPtr(src, element * @as(i64, @intCast(itemsize)));
        @memcpy(dst[out..][0..itemsize], at[0..itemsize]);
        out += itemsize;
        var d = shape.len;
        while (true) {
            if (d == 0) return assert(out == dst.len);
            d -= 1;
            index[d] += 1;
            if (index[d] < shape[d]) break;
            index[d] = 0;
        }
    }
}

/// A random view of rank 1-4 over a C-contiguous buffer: its dims permuted, some stepping over
/// every other element, some flipped. Returns the element offset of the view's first element.
fn randomLayout(random: std.Random, shape: []i64, strides: []i64, buffer_elements: *usize) i64 {
    const ndim = shape.len;
    var steps: [4]i64 = undefined;
    var order: [4]usize = .{ 0, 1, 2, 3 };
    random.shuffle(usize, order[0..ndim]);
    var count: i64 = 1;
    for (0..ndim) |d| {
        // Mostly small extents, now and then one past a 1-byte tile's 64 items (a few thousand
        // elements in all, so that a round stays cheap in a Debug build).
        const big = count < 200 and random.uintLessThan(u8, 3) == 0;
        shape[d] = if (big)
            random.intRangeAtMost(i64, 60, 150)
        else
            random.intRangeAtMost(i64, 1, 9);
        count *= shape[d];
        steps[d] = if (random.uintLessThan(u8, 4) == 0) 2 else 1;
    }
    // The buffer's dims in `order`, innermost last; each view dim steps over its buffer dim.
    var pitch: i64 = 1;
    var k = ndim;
    while (k > 0) {
        k -= 1;
        const d = order[k];
        strides[d] = pitch * steps[d];
        pitch *= shape[d] * steps[d];
    }
    buffer_elements.* = @intCast(pitch);
    var origin: i64 = 0;
    for (0..ndim) |d| {
        if (random.boolean()) {
            origin += (shape[d] - 1) * strides[d];
            strides[d] = -strides[d];
        }
    }
    return origin;
}

test "strided copy: random layouts of rank 1-4 and every item size match the reference" {
    var prng = std.Random.DefaultPrng.init(0x5eed_c0b1);
    const random = prng.random();
    const sizes = [_]usize{ 1, 2, 4, 8, 16, 3 };
    for (0..600) |round| {
        const itemsize = sizes[round % sizes.len];
        const ndim = 1 + random.uintLessThan(usize, 4);
        var shape: [4]i64 = undefined;
        var strides: [4]i64 = undefined;
        var elements: usize = 0;
        const origin = randomLayout(random, shape[0..ndim], strides[0..ndim], &elements);
        const src = try testing.allocator.alloc(u8, elements * itemsize);
        defer testing.allocator.free(src);
        random.bytes(src);
        var count: usize = 1;
        for (shape[0..ndim]) |extent| count *= @intCast(extent);
        const got = try testing.allocator.alloc(u8, count * itemsize);
        defer testing.allocator.free(got);
        const want = try testing.allocator.alloc(u8, count * itemsize);
        defer testing.allocator.free(want);
        const first = src.ptr + @as(usize, @intCast(origin)) * itemsize;
        copyStrided(got.ptr, first, itemsize, shape[0..ndim], strides[0..ndim]);
        copyReference(want, first, itemsize, shape[0..ndim], strides[0..ndim]);
        try testing.expectEqualSlices(u8, want, got);
    }
}
