//! The 2-D kernels of the strided copy (memory.zig's `copyStrided`): a block of the output whose
//! source steps far along the output's rows (a transpose, a column slice) is copied a square tile
//! at a time. Where the source is contiguous down the output's columns (`a.T`, a column-major
//! matrix read in C order) and items are 1-8 bytes, a tile is transposed in vector registers and
//! written out a whole cache line per output row (with non-temporal stores on x86-64 for big
//! blocks, so the output's lines are not read before they are overwritten); everything else (other
//! strides, the ragged edges, 16-byte items) goes through the portable gather.

const std = @import("std");
const builtin = @import("builtin");
const assert = std.debug.assert;

pub const cache_line_bytes = 64;

/// One 2-D block of a copy: the element at row `i`, column `j` of the output lies at
/// `dst + (i * pitch + j) * itemsize` and comes from `src + i * row_stride + j * col_stride`
/// (strides in bytes).
/// The caller checked the layout: every element lies in memory it may read.
pub const Block = struct {
    dst: [*]u8,
    /// Elements from one output row to the next (at least `cols`).
    pitch: usize,
    src: [*]const u8,
    rows: usize,
    cols: usize,
    row_stride_bytes: i64,
    col_stride_bytes: i64,

    fn sub(self: Block, row: usize, col: usize, rows: usize, cols: usize, itemsize: usize) Block {
        assert(row + rows <= self.rows and col + cols <= self.cols);
        const r: i64 = @intCast(row);
        const c: i64 = @intCast(col);
        const offset = r * self.row_stride_bytes + c * self.col_stride_bytes;
        const src = @as(usize, @intFromPtr(self.src)) +% @as(usize, @bitCast(offset));
        var block = self;
        block.dst = self.dst + (row * self.pitch + col) * itemsize;
        block.src = @ptrFromInt(src);
        block.rows = rows;
        block.cols = cols;
        return block;
    }
};

/// Whether the kernels take items of this size (every size the dtype table has).
pub fn supports(itemsize: usize) bool {
    return itemsize <= 16 and std.math.isPowerOfTwo(itemsize);
}

/// Copies `block` (items of `itemsize` bytes, which `supports`) through the fastest kernel that
/// fits its strides.
pub fn copyBlock(block: Block, itemsize: usize) void {
    assert(supports(itemsize));
    assert(block.pitch >= block.cols);
    if (block.rows == 0 or block.cols == 0) return;
    inline for (.{ 1, 2, 4, 8, 16 }) |size| {
        if (itemsize == size) {
            if (size <= 8 and block.row_stride_bytes == size) {
                return transposeSized(size, block, streams(block, size));
            }
            return gatherSized(size, block);
        }
    }
    unreachable;
}

// ---------------------------------------------------------------------------------------------
// The register transpose

/// Items per vector register (32 bytes, AVX2's width; a pair of SSE or NEON registers elsewhere),
/// at most 16 so that 1-byte items need 16 registers, not 32.
fn lanesOf(comptime size: usize) usize {
    return @min(32 / size, 16);
}

/// The side of a tile: one cache line of items, so that every line read from the source is read
/// whole while it is in L1, and every output line is written whole, once.
fn sideOf(comptime size: usize) usize {
    return cache_line_bytes / size;
}

fn Tile(comptime size: usize) type {
    const side = sideOf(size);
    return [side][side]std.meta.Int(.unsigned, size * 8);
}

/// Rows of the output in one band: the source is read 256 items (1 KiB of float32) down each of
/// its columns at a time, so each band reads a strip whose pages the TLB holds while the band's
/// output rows take their lines one tile at a time.
const band_items = 256;

/// Blocks of at least this many bytes stream their output past the caches. Below it the output
/// still fits the caches and plain stores were faster on the machine this was tuned on (float32
/// transposes of 4, 16 and 32 MiB: 0.60 against 0.44 of memcpy, 6.5 against 4.1 GB/s, 7.9
/// against 6.7 GB/s); above it streaming was (44 MiB: 6 against 2.6 GB/s; 64 MiB: 5.5 against
/// 1.9 GB/s, where plain stores read every output line from memory before overwriting it).
pub const stream_bytes_min: usize = 40 << 20;

/// Non-temporal stores need inline assembly that only the LLVM backend assembles (Zig's own x86
/// backend, used for Debug builds, does not know the instructions); elsewhere plain stores.
const can_stream = builtin.cpu.arch == .x86_64 and builtin.zig_backend == .stage2_llvm;
const has_avx = builtin.cpu.arch == .x86_64 and
    std.Target.x86.featureSetHas(builtin.cpu.features, .avx);

/// Whether the transpose of `block` streams: a big block whose output rows start on cache lines.
fn streams(block: Block, itemsize: usize) bool {
    return block.rows * block.cols * itemsize >= stream_bytes_min and streamable(block, itemsize);
}

fn streamable(block: Block, itemsize: usize) bool {
    return can_stream and @intFromPtr(block.dst) % cache_line_bytes == 0 and
        (block.pitch * itemsize) % cache_line_bytes == 0;
}

fn transposeSized(comptime size: usize, block: Block, stream: bool) void {
    @setRuntimeSafety(false); // addresses inside the span the caller validated
    const side = sideOf(size);
    assert(block.row_stride_bytes == size);
    assert(!stream or streamable(block, size));
    const rows_main = block.rows / side * side;
    const cols_main = block.cols / side * side;
    const pitch_bytes = block.pitch * size;
    const col_stride: usize = @bitCast(@as(isize, @intCast(block.col_stride_bytes)));
    var tile: Tile(size) align(cache_line_bytes) = undefined;
    var band: usize = 0;
    while (band < rows_main) : (band += band_items) {
        const band_end = @min(band + band_items, rows_main);
        var col: usize = 0;
        while (col < cols_main) : (col += side) {
            var row = band;
            while (row < band_end) : (row += side) {
                const from = @intFromPtr(block.src) +% row * size +% col *% col_stride;
                loadTile(size, &tile, from, col_stride);
                const to = block.dst + (row * block.pitch + col) * size;
                storeTile(size, &tile, to, pitch_bytes, stream);
            }
        }
    }
    if (stream) fence();
    // The ragged edges: the columns right of the tiles, then the rows below them.
    gatherSized(size, block.sub(0, cols_main, rows_main, block.cols - cols_main, size));
    gatherSized(size, block.sub(rows_main, 0, block.rows - rows_main, block.cols, size));
}

/// Reads a tile whose item (i, j) lies at `src + i * size + j * col_stride` into `tile[i][j]`,
/// `lanes` x `lanes` items at a time through registers.
fn loadTile(comptime size: usize, tile: *Tile(size), src: usize, col_stride: usize) void {
    @setRuntimeSafety(false);
    const T = std.meta.Int(.unsigned, size * 8);
    const lanes = comptime lanesOf(size);
    const V = @Vector(lanes, T);
    comptime assert(sideOf(size) % lanes == 0);
    var j: usize = 0;
    while (j < sideOf(size)) : (j += lanes) {
        var i: usize = 0;
        while (i < sideOf(size)) : (i += lanes) {
            var registers: [lanes]V = undefined;
            inline for (0..lanes) |t| {
                const at = src +% (j + t) *% col_stride +% i * size;
                registers[t] = @as(*align(1) const V, @ptrFromInt(at)).*;
            }
            transposeRegisters(T, lanes, &registers);
            inline for (0..lanes) |u| tile[i + u][j..][0..lanes].* = registers[u];
        }
    }
}

/// Transposes a square of `lanes` vectors in place: log2(lanes) rounds of interleaving vector m
/// with vector m + lanes/2. Each round rotates the bits of the row index left by one, feeding in
/// the column's top bit (and the column's the other way), so after log2(lanes) rounds the row and
/// column indexes have swapped.
fn transposeRegisters(
    comptime T: type,
    comptime lanes: usize,
    registers: *[lanes]@Vector(lanes, T),
) void {
    const half = lanes / 2;
    const masks = comptime interleaveMasks(lanes);
    inline for (0..comptime std.math.log2_int(usize, lanes)) |_| {
        var next: [lanes]@Vector(lanes, T) = undefined;
        inline for (0..half) |m| {
            next[2 * m] = @shuffle(T, registers[m], registers[m + half], masks[0]);
            next[2 * m + 1] = @shuffle(T, registers[m], registers[m + half], masks[1]);
        }
        registers.* = next;
    }
}

/// The shuffle masks interleaving the low halves of two vectors, then their high halves.
fn interleaveMasks(comptime lanes: usize) [2]@Vector(lanes, i32) {
    var low: [lanes]i32 = undefined;
    var high: [lanes]i32 = undefined;
    const half: i32 = @intCast(lanes / 2);
    for (0..lanes) |index| {
        const k: i32 = @intCast(index / 2);
        low[index] = if (index % 2 == 0) k else ~k;
        high[index] = if (index % 2 == 0) half + k else ~(half + k);
    }
    return .{ low, high };
}

fn storeTile(
    comptime size: usize,
    tile: *align(cache_line_bytes) const Tile(size),
    dst: [*]u8,
    pitch_bytes: usize,
    stream: bool,
) void {
    @setRuntimeSafety(false);
    for (0..sideOf(size)) |row| {
        const line: *align(cache_line_bytes) const [cache_line_bytes]u8 = @ptrCast(&tile[row]);
        const at = dst + row * pitch_bytes;
        if (stream) {
            streamLine(at, line);
        } else {
            @as(*align(1) [cache_line_bytes]u8, @ptrCast(at)).* = line.*;
        }
    }
}

/// Writes one whole cache line with non-temporal stores: it goes to memory through the
/// write-combining buffers without first being read into the cache.
fn streamLine(dst: [*]u8, line: *align(cache_line_bytes) const [cache_line_bytes]u8) void {
    if (comptime !can_stream) unreachable;
    assert(@intFromPtr(dst) % cache_line_bytes == 0);
    const width = if (has_avx) 32 else 16;
    const V = @Vector(width / 8, u64);
    inline for (0..cache_line_bytes / width) |k| {
        const value: V = @bitCast(line[k * width ..][0..width].*);
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

/// Orders the streamed stores before anything after the copy (they are weakly ordered).
fn fence() void {
    if (comptime !can_stream) unreachable;
    asm volatile ("sfence" ::: .{ .memory = true });
}

// ---------------------------------------------------------------------------------------------
// The portable gather

// A tile spans one cache line of the source along the rows and one of the output along the
// columns (16 x 16 float32). It is gathered into a small buffer first, reading each source line
// whole, then written out a whole output line at a time. With power-of-two strides every line of a
// tile maps to the same cache set, so copying straight from source to output (each step touching
// one line of each) thrashes that set; through the buffer only one line of each side is live.
fn gatherSized(comptime size: usize, block: Block) void {
    // The inner loops run on addresses the import validated (the whole span lies in the
    // producer's memory): plain wrapping arithmetic, no per-element checks.
    @setRuntimeSafety(false);
    if (block.rows == 0 or block.cols == 0) return;
    const tile: usize = @max(cache_line_bytes / size, 4);
    // Blocks of about 1 KiB per source column and per output row: their pages fit the TLB and
    // their lines the L2 cache, whichever way a tile walks.
    const step: usize = tile * (1024 / cache_line_bytes);
    var row: usize = 0;
    while (row < block.rows) : (row += step) {
        const rows = @min(step, block.rows - row);
        var col: usize = 0;
        while (col < block.cols) : (col += step) {
            const cols = @min(step, block.cols - col);
            gatherArea(size, block.sub(row, col, rows, cols, size));
        }
    }
}

fn gatherArea(comptime size: usize, block: Block) void {
    @setRuntimeSafety(false);
    const T = std.meta.Int(.unsigned, size * 8);
    const tile: usize = comptime @max(cache_line_bytes / size, 4);
    var buffer: [tile][tile]T = undefined;
    const out: [*]align(1) T = @ptrCast(block.dst);
    const base = @intFromPtr(block.src);
    const rs: usize = @bitCast(@as(isize, @intCast(block.row_stride_bytes)));
    const cs: usize = @bitCast(@as(isize, @intCast(block.col_stride_bytes)));
    var row0: usize = 0;
    while (row0 < block.rows) : (row0 += tile) {
        const n_rows = @min(tile, block.rows - row0);
        var col0: usize = 0;
        while (col0 < block.cols) : (col0 += tile) {
            const n_cols = @min(tile, block.cols - col0);
            // Gather: down each source column (consecutive rows share its cache lines).
            for (0..n_cols) |j| {
                var at = base +% row0 *% rs +% (col0 + j) *% cs;
                for (0..n_rows) |i| {
                    buffer[j][i] = @as(*align(1) const T, @ptrFromInt(at)).*;
                    at +%= rs;
                }
            }
            // Scatter: along each output row.
            for (0..n_rows) |i| {
                const row = out + (row0 + i) * block.pitch + col0;
                for (0..n_cols) |j| row[j] = buffer[j][i];
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Tests: every kernel against an element-by-element reference, byte for byte.

const testing = std.testing;

fn expectBlockCopied(block: Block, itemsize: usize) !void {
    for (0..block.rows) |i| for (0..block.cols) |j| {
        const offset = @as(i64, @intCast(i)) * block.row_stride_bytes +
            @as(i64, @intCast(j)) * block.col_stride_bytes;
        const address = @intFromPtr(block.src) +% @as(usize, @bitCast(offset));
        const from: [*]const u8 = @ptrFromInt(address);
        const got = block.dst[(i * block.pitch + j) * itemsize ..][0..itemsize];
        try testing.expectEqualSlices(u8, from[0..itemsize], got);
    };
}

fn checkTranspose(
    comptime size: usize,
    rows: usize,
    cols: usize,
    dst_shift: usize,
    flip: bool,
    force_stream: bool,
) !void {
    const gap = 3; // source rows apart by more than a column's length
    const src_pitch = rows + gap;
    const src = try testing.allocator.alignedAlloc(u8, .@"64", src_pitch * cols * size);
    defer testing.allocator.free(src);
    for (src, 0..) |*b, k| b.* = @truncate(k *% 131 +% k / 253);
    const pitch = cols + dst_shift;
    const dst = try testing.allocator.alignedAlloc(u8, .@"64", (rows * pitch + dst_shift) * size);
    defer testing.allocator.free(dst);
    @memset(dst, 0xA5);
    const col_stride: i64 = @intCast(src_pitch * size);
    const start = if (flip) (cols - 1) * src_pitch * size else 0;
    const block: Block = .{
        .dst = dst.ptr + dst_shift * size,
        .pitch = pitch,
        .src = src.ptr + start,
        .rows = rows,
        .cols = cols,
        .row_stride_bytes = size,
        .col_stride_bytes = if (flip) -col_stride else col_stride,
    };
    if (force_stream) {
        assert(streamable(block, size));
        transposeSized(size, block, true);
    } else {
        copyBlock(block, size);
    }
    try expectBlockCopied(block, size);
    // Nothing outside the block's rows was written.
    for (dst[0 .. dst_shift * size]) |b| try testing.expectEqual(@as(u8, 0xA5), b);
    for (0..rows) |i| {
        const tail = dst[(dst_shift + i * pitch + cols) * size ..][0 .. (pitch - cols) * size];
        for (tail) |b| try testing.expectEqual(@as(u8, 0xA5), b);
    }
}

test "transpose kernel: every item size, whole tiles and ragged edges, both column directions" {
    const shapes = [_][2]usize{
        .{ 64, 64 }, .{ 128, 192 }, .{ 67, 130 }, .{ 1, 200 }, .{ 300, 5 }, .{ 257, 63 },
    };
    inline for (.{ 1, 2, 4, 8, 16 }) |size| {
        for (shapes) |shape| for ([_]usize{ 0, 1 }) |shift| for ([_]bool{ false, true }) |flip| {
            try checkTranspose(size, shape[0], shape[1], shift, flip, false);
        };
    }
}

test "transpose kernel: streamed output, every item size, ragged edges" {
    // Blocks below the threshold, streamed anyway (where the backend can): the same bytes.
    if (!can_stream) return error.SkipZigTest;
    const shapes = [_][2]usize{ .{ 64, 64 }, .{ 130, 192 }, .{ 300, 256 } };
    inline for (.{ 1, 2, 4, 8 }) |size| {
        for (shapes) |shape| for ([_]bool{ false, true }) |flip| {
            try checkTranspose(size, shape[0], shape[1], 0, flip, true);
        };
    }
}

test "transpose kernel: a block over the streaming threshold, aligned and not" {
    // 3328 x 3328 float32 is 44 MiB; a shifted output cannot stream.
    try checkTranspose(4, 3328, 3328, 0, false, false);
    try checkTranspose(4, 3328, 3344, 1, true, false);
}

test "register transpose: every lane count" {
    inline for (.{ 1, 2, 4, 8 }) |size| {
        const T = std.meta.Int(.unsigned, size * 8);
        const lanes = comptime lanesOf(size);
        var registers: [lanes]@Vector(lanes, T) = undefined;
        for (0..lanes) |r| for (0..lanes) |c| {
            registers[r][c] = @intCast(r * lanes + c);
        };
        transposeRegisters(T, lanes, &registers);
        for (0..lanes) |r| for (0..lanes) |c| {
            try testing.expectEqual(@as(T, @intCast(c * lanes + r)), registers[r][c]);
        };
    }
}
