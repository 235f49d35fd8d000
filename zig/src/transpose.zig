//! The 2-D kernels of the strided copy (memory.zig's `copyStrided`): a block of the output whose
//! source steps far along the output's rows (a transpose, a column slice) is copied a square tile
//! at a time. Where the source is contiguous down the output's columns (`a.T`, a column-major
//! matrix read in C order) and items are 1-8 bytes, a tile is transposed in vector registers and
//! written out a whole cache line per output row (with non-temporal stores on x86-64 for big
//! copies, so the output's lines are not read before they are overwritten); everything else
//! (other strides, the ragged edges, 16-byte items) goes through the portable gather.

const std = @import("std");
const assert = std.debug.assert;
const stream = @import("stream.zig");

pub const cache_line_bytes = stream.cache_line_bytes;

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
/// fits its strides. `streaming`: the whole copy is big enough to stream its output (the caller
/// fences once it is done); the transposes do where the output's rows start on cache lines.
pub fn copyBlock(block: Block, itemsize: usize, streaming: bool) void {
    assert(supports(itemsize));
    assert(block.pitch >= block.cols);
    if (block.rows == 0 or block.cols == 0) return;
    inline for (.{ 1, 2, 4, 8, 16 }) |size| {
        if (itemsize == size) {
            if (size <= 8 and block.row_stride_bytes == size) {
                return transposeSized(size, block, streaming and streamable(block, size));
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

/// Rows of the output in one band: the source is read 1024 items down each of its columns at a
/// time (4 KiB of float32), long enough a burst for the hardware prefetcher to follow all the
/// columns of a strip, while the band's output rows (1024 pages at most) stay within the
/// second-level TLB. Against 256 rows, on a 2-core AMD EPYC VM, a 64 MiB float32 transpose
/// went from 0.57 to 0.70 of memcpy with 4 KiB pages, 0.59 to 0.76 with huge pages. On an Intel
/// Xeon VM (2 cores, AVX-512), with the strips below: 512 rows 0.77, 1024 and 2048 0.86.
const band_rows = 1024;

/// Output columns of one strip, walked down the band a row of tiles at a time: 32 source columns
/// read side by side (the streams an L2 prefetcher follows at once), and every output row
/// written two cache lines at a time (for float32) instead of one line scattered per tile. On the
/// Intel Xeon VM (64 MiB float32, huge pages, thread CPU time, interleaved, medians), against a
/// streamed contiguous copy: one 16-column tile 0.72-0.79 (10.1 GB/s), 32 columns 0.86-0.88
/// (11.4-11.7 GB/s), 48 columns 0.77-0.79, 64 columns 0.62-0.64; a float64 transpose of 64 MiB
/// 0.75-0.76 with one 8-column tile, 0.95-1.0 with 32 columns. Interleaved with copies into fresh
/// 64 MiB, a float32 copyFrom of a.T gained less: 0.68-0.74 (median of 11 runs 0.70) to 0.68-0.78
/// (median of 17 runs 0.73) of a contiguous copyFrom; 0.83-0.91 without them (the bench). Neither
/// software prefetch of the next tiles' source lines (0.74 one tile ahead, 0.69 four) nor
/// AVX-512's 64-byte registers and streamed stores (0.69-0.77) helped.
const strip_cols = 32;

/// Whether the transpose of `block` can stream: output rows that start on cache lines.
fn streamable(block: Block, itemsize: usize) bool {
    return stream.available and @intFromPtr(block.dst) % cache_line_bytes == 0 and
        (block.pitch * itemsize) % cache_line_bytes == 0;
}

fn transposeSized(comptime size: usize, block: Block, streaming: bool) void {
    @setRuntimeSafety(false); // addresses inside the span the caller validated
    const side = sideOf(size);
    assert(block.row_stride_bytes == size);
    assert(!streaming or streamable(block, size));
    const rows_main = block.rows / side * side;
    const cols_main = block.cols / side * side;
    const pitch_bytes = block.pitch * size;
    const col_stride: usize = @bitCast(@as(isize, @intCast(block.col_stride_bytes)));
    const strip_width = comptime @max(sideOf(size), strip_cols);
    var band: usize = 0;
    while (band < rows_main) : (band += band_rows) {
        const band_end = @min(band + band_rows, rows_main);
        var strip: usize = 0;
        while (strip < cols_main) : (strip += strip_width) {
            const strip_end = @min(strip + strip_width, cols_main);
            var row = band;
            while (row < band_end) : (row += side) {
                var col = strip;
                while (col < strip_end) : (col += side) {
                    const from = @intFromPtr(block.src) +% row * size +% col *% col_stride;
                    const to = block.dst + (row * block.pitch + col) * size;
                    copyTile(size, from, col_stride, to, pitch_bytes, streaming);
                }
            }
        }
    }
    // The ragged edges: the columns right of the tiles, then the rows below them.
    gatherSized(size, block.sub(0, cols_main, rows_main, block.cols - cols_main, size));
    gatherSized(size, block.sub(rows_main, 0, block.rows - rows_main, block.cols, size));
}

/// Copies one tile: item (i, j) of the output at `dst + i * pitch_bytes + j * size` from
/// `src + i * size + j * col_stride`. Items of 2-8 bytes go from the registers straight to the
/// output, a whole line per row (two registers); bytes, whose tile takes 64 registers, go through
/// a buffer.
fn copyTile(
    comptime size: usize,
    src: usize,
    col_stride: usize,
    dst: [*]u8,
    pitch_bytes: usize,
    streaming: bool,
) void {
    @setRuntimeSafety(false);
    if (comptime lanesOf(size) * size < 32) {
        var tile: Tile(size) align(cache_line_bytes) = undefined;
        loadTile(size, &tile, src, col_stride);
        storeTile(size, &tile, dst, pitch_bytes, streaming);
        return;
    }
    const T = std.meta.Int(.unsigned, size * 8);
    const lanes = comptime lanesOf(size);
    const V = @Vector(lanes, T);
    const blocks = comptime sideOf(size) / lanes;
    inline for (0..blocks) |ib| {
        // The output rows ib * lanes.. of the tile: `blocks` squares side by side.
        var squares: [blocks][lanes]V = undefined;
        inline for (&squares, 0..) |*square, jb| {
            inline for (square, 0..) |*register, t| {
                const at = src +% (jb * lanes + t) *% col_stride +% ib * lanes * size;
                register.* = @as(*align(1) const V, @ptrFromInt(at)).*;
            }
            transposeRegisters(T, lanes, square);
        }
        inline for (0..lanes) |u| {
            var row: [blocks]V align(cache_line_bytes) = undefined;
            inline for (&row, squares) |*part, square| part.* = square[u];
            const bytes: *align(cache_line_bytes) const [cache_line_bytes]u8 = @ptrCast(&row);
            storeLine(dst + (ib * lanes + u) * pitch_bytes, bytes, streaming);
        }
    }
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

/// Transposes a square of `lanes` vectors in place. 16-byte vectors: log2(lanes) rounds of
/// interleaving vector m with vector m + lanes/2 (each an unpack instruction). Each round rotates
/// the bits of the row index left by one, feeding in the column's top bit (and the column's the
/// other way), so after log2(lanes) rounds the row and column indexes have swapped. Wider vectors
/// swap blocks instead (`swapBlocks`), whose rounds stay within 16-byte lanes but the last.
fn transposeRegisters(
    comptime T: type,
    comptime lanes: usize,
    registers: *[lanes]@Vector(lanes, T),
) void {
    if (comptime lanes * @sizeOf(T) > 16) return swapBlocks(T, lanes, registers);
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

/// Transposes a square of `lanes` vectors in place, in log2(lanes) rounds: the round of width `w`
/// swaps, in every pair of vectors `w` apart, the upper `w` items of each 2w-item group of the
/// first with the lower `w` of the second (exchanging bit log2(w) of the row and column indexes).
/// With 32-byte vectors only the round that swaps 16-byte halves crosses the vector's halves (one
/// vperm2f128 or vinsertf128 per vector on AVX2, a register move on 16-byte hardware); interleaving
/// would cross them in every round.
fn swapBlocks(comptime T: type, comptime lanes: usize, registers: *[lanes]@Vector(lanes, T)) void {
    comptime var width: usize = 1;
    inline while (width < lanes) : (width *= 2) {
        const masks = comptime swapMasks(lanes, width);
        inline for (0..lanes) |m| {
            if (m & width != 0) continue;
            const first = registers[m];
            const second = registers[m + width];
            registers[m] = @shuffle(T, first, second, masks[0]);
            registers[m + width] = @shuffle(T, first, second, masks[1]);
        }
    }
}

/// The shuffle masks of one `swapBlocks` round: the first vector's new items, then the second's.
fn swapMasks(comptime lanes: usize, comptime width: usize) [2]@Vector(lanes, i32) {
    var first: [lanes]i32 = undefined;
    var second: [lanes]i32 = undefined;
    for (0..lanes) |index| {
        const k: i32 = @intCast(index);
        const w: i32 = @intCast(width);
        const upper = index & width != 0;
        first[index] = if (upper) ~(k - w) else k;
        second[index] = if (upper) ~k else k + w;
    }
    return .{ first, second };
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
    streaming: bool,
) void {
    @setRuntimeSafety(false);
    for (0..sideOf(size)) |row| {
        const line: *align(cache_line_bytes) const [cache_line_bytes]u8 = @ptrCast(&tile[row]);
        storeLine(dst + row * pitch_bytes, line, streaming);
    }
}

/// One whole line of output: streamed past the caches, or stored plainly.
inline fn storeLine(
    dst: [*]u8,
    line: *align(cache_line_bytes) const [cache_line_bytes]u8,
    streaming: bool,
) void {
    if (streaming) {
        stream.line(dst, line);
    } else {
        @as(*align(1) [cache_line_bytes]u8, @ptrCast(dst)).* = line.*;
    }
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
    streaming: bool,
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
    copyBlock(block, size, streaming);
    if (streaming and stream.available) stream.fence();
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
        .{ 1090, 70 }, // more rows than a band
    };
    inline for (.{ 1, 2, 4, 8, 16 }) |size| {
        for (shapes) |shape| for ([_]usize{ 0, 1 }) |shift| for ([_]bool{ false, true }) |flip| {
            try checkTranspose(size, shape[0], shape[1], shift, flip, false);
        };
    }
}

test "transpose kernel: streamed output, every item size, ragged edges" {
    // Small blocks streamed (where the backend can): the same bytes. A shifted output (its rows
    // off the cache lines) is refused the streaming and stored plainly.
    if (!stream.available) return error.SkipZigTest;
    // 80 columns: two whole strips of float32 and half of one.
    const shapes = [_][2]usize{
        .{ 64, 64 }, .{ 130, 192 }, .{ 300, 256 }, .{ 1090, 64 }, .{ 200, 80 },
    };
    inline for (.{ 1, 2, 4, 8, 16 }) |size| {
        for (shapes) |shape| for ([_]usize{ 0, 1 }) |shift| for ([_]bool{ false, true }) |flip| {
            try checkTranspose(size, shape[0], shape[1], shift, flip, true);
        };
    }
}

test "transpose kernel: a block over the streaming threshold, aligned and not" {
    // 3328 x 3328 float32 is 44 MiB; a shifted output cannot stream.
    try checkTranspose(4, 3328, 3328, 0, false, true);
    try checkTranspose(4, 3328, 3344, 1, true, true);
}

test "register transpose: every lane count, both methods" {
    inline for (.{ 1, 2, 4, 8 }) |size| {
        const T = std.meta.Int(.unsigned, size * 8);
        const lanes = comptime lanesOf(size);
        inline for (.{ false, true }) |swapping| {
            var registers: [lanes]@Vector(lanes, T) = undefined;
            for (0..lanes) |r| for (0..lanes) |c| {
                registers[r][c] = @intCast(r * lanes + c);
            };
            if (swapping) {
                swapBlocks(T, lanes, &registers);
            } else {
                transposeRegisters(T, lanes, &registers);
            }
            for (0..lanes) |r| for (0..lanes) |c| {
                try testing.expectEqual(@as(T, @intCast(c * lanes + r)), registers[r][c]);
            };
        }
    }
}
