//! Process-wide live counters. They exist so leak tests (and users) can see that every import,
//! export, allocation and pinned JS buffer was released; deleters on any thread update them. Each
//! thread counts in a block of its own (no locked instruction per update); a reading sums them.

const std = @import("std");
const builtin = @import("builtin");
const assert = std.debug.assert;

/// The order `dlpk_stats` writes the counters in (src/facts/abi.ts `StatsCounter`).
pub const Counter = enum(u8) {
    imports,
    exports,
    allocations,
    allocation_bytes,
    pins,
    pinned_bytes,
    deleters_called,
    /// Files mapped by the tensors-on-disk entry that some view, share or export still holds.
    mappings,
    mapped_bytes,
};

pub const counter_count = @typeInfo(Counter).@"enum".fields.len;

const Value = std.atomic.Value(i64);

/// One set of counters. A thread updates only the block it holds, so its adds are a plain load and
/// store (no locked instruction on the import and export paths); readers sum every block.
const Block = struct {
    values: [counter_count]Value = [_]Value{Value.init(0)} ** counter_count,
    /// The next block of `blocks` (blocks are never removed: their values stay part of the sums).
    next: ?*Block = null,
    /// No thread holds it: the next new thread takes it over, values and all.
    free: std.atomic.Value(bool) = std.atomic.Value(bool).init(false),
    /// Two cache lines in all, so that blocks of different threads share none (malloc aligns 16).
    padding: [128 - 16 - 8 * counter_count - 16]u8 = undefined,
};

/// Updated with locked adds by threads without a block of their own: where a thread's end cannot
/// be observed (no pthreads), a thread that is ending, or when no block could be allocated.
var shared: Block = .{};
var blocks: std.atomic.Value(?*Block) = std.atomic.Value(?*Block).init(null);
threadlocal var held: ?*Block = null;
threadlocal var ending: bool = false;

const per_thread = builtin.os.tag != .windows and builtin.link_libc;
var block_key: if (per_thread) std.c.pthread_key_t else void = undefined;
var block_key_once = std.once(makeBlockKey);
var block_key_ready: bool = false;

fn makeBlockKey() void {
    if (!per_thread) return;
    block_key_ready = std.c.pthread_key_create(&block_key, threadEnded) == .SUCCESS;
}

/// The thread's end: its block goes back for the next new thread. Adds made later on this thread
/// (other threads' exit hooks) go to the shared block.
fn threadEnded(value: *anyopaque) callconv(.c) void {
    const block: *Block = @ptrCast(@alignCast(value));
    assert(held == block);
    held = null;
    ending = true;
    block.free.store(true, .release);
}

/// Inline: a function that adds to several counters then looks the thread's block up once.
pub inline fn add(counter: Counter, delta: i64) void {
    const block = held orelse return addUnheld(counter, delta);
    // Only this thread writes the block while it holds it.
    const value = &block.values[@intFromEnum(counter)];
    value.store(value.load(.monotonic) + delta, .monotonic);
}

noinline fn addUnheld(counter: Counter, delta: i64) void {
    @branchHint(.cold);
    if (claim()) |block| {
        held = block;
        const value = &block.values[@intFromEnum(counter)];
        value.store(value.load(.monotonic) + delta, .monotonic);
        return;
    }
    _ = shared.values[@intFromEnum(counter)].fetchAdd(delta, .monotonic);
}

/// A block for the calling thread: a free one, or a new one; null where there can be none.
fn claim() ?*Block {
    if (!per_thread or ending) return null;
    block_key_once.call();
    if (!block_key_ready) return null;
    const block = reuse() orelse fresh() orelse return null;
    // The key's value is what tells the exit hook to give the block back.
    if (std.c.pthread_setspecific(block_key, block) != 0) {
        block.free.store(true, .release);
        return null;
    }
    return block;
}

comptime {
    assert(@sizeOf(Block) == 128 - 16);
}

fn reuse() ?*Block {
    var it = blocks.load(.acquire);
    while (it) |block| : (it = block.next) {
        if (!block.free.load(.monotonic)) continue;
        if (block.free.cmpxchgStrong(true, false, .acquire, .monotonic) == null) return block;
    }
    return null;
}

fn fresh() ?*Block {
    const block = std.heap.raw_c_allocator.create(Block) catch return null;
    block.* = .{};
    var head = blocks.load(.monotonic);
    while (true) {
        block.next = head;
        head = blocks.cmpxchgWeak(head, block, .release, .monotonic) orelse return block;
    }
}

pub fn get(counter: Counter) i64 {
    const i = @intFromEnum(counter);
    var sum = shared.values[i].load(.monotonic);
    var it = blocks.load(.acquire);
    while (it) |block| : (it = block.next) sum += block.values[i].load(.monotonic);
    return sum;
}

/// Writes every counter as an f64 (what the JS side reads without BigInt conversions).
pub fn snapshot(out: *[counter_count]f64) void {
    for (out, 0..) |*slot, i| slot.* = @floatFromInt(get(@enumFromInt(i)));
}

test "counters add and snapshot" {
    const before = get(.pins);
    add(.pins, 3);
    add(.pins, -1);
    try std.testing.expectEqual(before + 2, get(.pins));
    var out: [counter_count]f64 = undefined;
    snapshot(&out);
    try std.testing.expectEqual(
        @as(f64, @floatFromInt(before + 2)),
        out[@intFromEnum(Counter.pins)],
    );
    add(.pins, -2);
}

test "counts made on other threads, ended or not, are all in the sums" {
    const before = get(.pins);
    const Adder = struct {
        fn run(n: usize) void {
            for (0..n) |_| add(.pins, 1);
            for (0..n / 2) |_| add(.pins, -1);
        }
    };
    // Two waves: the second wave's threads take over the blocks the first left behind.
    for (0..2) |_| {
        var threads: [4]std.Thread = undefined;
        for (&threads) |*t| t.* = try std.Thread.spawn(.{}, Adder.run, .{1000});
        for (threads) |t| t.join();
    }
    try std.testing.expectEqual(before + 8 * 500, get(.pins));
    add(.pins, -8 * 500);
    try std.testing.expectEqual(before, get(.pins));
}
