//! Process-wide live counters. They exist so leak tests (and users) can see that every import,
//! export, allocation and pinned JS buffer was released; deleters on any thread update them.

const std = @import("std");

/// The order `dlpk_stats` writes the counters in (src/abi.ts `StatsCounter`).
pub const Counter = enum(u8) {
    imports,
    exports,
    allocations,
    allocation_bytes,
    pins,
    pinned_bytes,
    deleters_called,
};

pub const counter_count = @typeInfo(Counter).@"enum".fields.len;

const Value = std.atomic.Value(i64);
var counters: [counter_count]Value = [_]Value{Value.init(0)} ** counter_count;

pub fn add(counter: Counter, delta: i64) void {
    _ = counters[@intFromEnum(counter)].fetchAdd(delta, .monotonic);
}

pub fn get(counter: Counter) i64 {
    return counters[@intFromEnum(counter)].load(.monotonic);
}

/// Writes every counter as an f64 (what the JS side reads without BigInt conversions).
pub fn snapshot(out: *[counter_count]f64) void {
    for (out, 0..) |*slot, i| slot.* = @floatFromInt(counters[i].load(.monotonic));
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
