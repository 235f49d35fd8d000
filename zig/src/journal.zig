//! The journal of releases the JS side owes, one per thread; an entry is an owner record or a
//! managed struct (abi.zig's `ownerEntry`, `structEntry`). Two ways in:
//! - Every C entry that hands JS an owner record or a struct (imports, allocations, retains, pins,
//!   exports) pushes it here before it returns. JS ends the entry with one store once a view, a
//!   capsule or a share holds it; an exception in between leaves it to be replayed. Between such a
//!   call and that store no caller code runs and nothing replays the journal (docs/internals/).
//! - JS writes an entry and raises the count before it calls a release, with no call in between:
//!   if the call cannot even start (an exhausted stack), the entry stays and is replayed later.
//! A release ends its entry here before anything else, because a producer's deleter may be a JS
//! callback that throws, and the runtime rethrows that from the release call itself: JS never sees
//! it return, and an entry it had to end would be replayed, releasing twice.
//!
//! It lives here, per thread, rather than in each copy of the JS module: a program may load the
//! module twice (two versions, two URLs) into one realm, and each release then finds the journal
//! without being told where it is (an extra argument costs Bun's FFI calls several nanoseconds).
//! JS reads and writes it through a view of `local()`; a thread's journal ends with the thread,
//! as does every realm that can see it.

const std = @import("std");
const assert = std.debug.assert;

/// Entries a journal holds. An entry written past it is dropped by the JS view (and leaked: that
/// takes 4096 releases in a row that could not start).
pub const capacity = 4096;

pub const Journal = extern struct {
    /// Entries in use; above `capacity` it also counts entries that were never stored.
    count: i32,
    reserved: i32,
    entries: [capacity]f64,
};

comptime {
    assert(@offsetOf(Journal, "count") == 0);
    assert(@offsetOf(Journal, "entries") == 8);
    assert(@sizeOf(Journal) == 8 + capacity * 8);
}

threadlocal var journal: Journal = std.mem.zeroes(Journal);

/// This thread's journal.
pub fn local() *Journal {
    return &journal;
}

/// Pushes `value` as the top entry of `j`: what a C entry hands JS, owed until JS ends the entry.
/// Past capacity only the count moves (the entry is lost, as a JS write past it would be).
pub fn push(j: *Journal, value: f64) void {
    const n = j.count;
    if (n < 0) return;
    if (n < capacity) j.entries[@intCast(n)] = value;
    j.count = n +| 1;
}

/// Ends the top entry of `j` if it holds `value` (the release it stands for is starting); above
/// capacity, ends one entry that was never stored. Anything else is left alone: the caller then
/// releases something that was not journaled (a test, or a hostile caller of the C ABI).
pub fn end(j: *Journal, value: f64) void {
    const n = j.count;
    if (n > capacity) {
        j.count = n - 1;
    } else if (n > 0 and j.entries[@intCast(n - 1)] == value) {
        j.count = n - 1;
    }
}

/// Ends the top entry of `j` and returns what it holds; null when there is none (a count of 0,
/// below 0, or above capacity, which the caller trims to capacity).
pub fn pop(j: *Journal) ?f64 {
    const n = j.count;
    if (n <= 0 or n > capacity) return null;
    j.count = n - 1;
    return j.entries[@intCast(n - 1)];
}

test "end removes only the top entry it is told about" {
    const testing = std.testing;
    var j = std.mem.zeroes(Journal);
    end(&j, 7); // empty: nothing
    try testing.expectEqual(@as(i32, 0), j.count);
    j.entries[0] = 5;
    j.entries[1] = 7;
    j.count = 2;
    end(&j, 5); // not the top
    try testing.expectEqual(@as(i32, 2), j.count);
    end(&j, 7);
    try testing.expectEqual(@as(i32, 1), j.count);
    end(&j, std.math.nan(f64)); // matches nothing
    try testing.expectEqual(@as(i32, 1), j.count);
    // Past capacity the top was never stored: one such entry goes, whatever the value.
    j.count = capacity + 2;
    end(&j, 1);
    try testing.expectEqual(@as(i32, capacity + 1), j.count);
    j.count = -3;
    end(&j, 1);
    try testing.expectEqual(@as(i32, -3), j.count);
}

test "push stores below capacity and counts past it" {
    const testing = std.testing;
    var j = std.mem.zeroes(Journal);
    push(&j, 5);
    try testing.expectEqual(@as(i32, 1), j.count);
    try testing.expectEqual(@as(f64, 5), j.entries[0]);
    end(&j, 5);
    try testing.expectEqual(@as(i32, 0), j.count);
    j.count = capacity;
    push(&j, 7);
    try testing.expectEqual(@as(i32, capacity + 1), j.count);
    try testing.expectEqual(@as(?f64, null), pop(&j));
    j.count = -1;
    push(&j, 7);
    try testing.expectEqual(@as(i32, -1), j.count);
}

test "pop hands out stored entries only" {
    const testing = std.testing;
    var j = std.mem.zeroes(Journal);
    try testing.expectEqual(@as(?f64, null), pop(&j));
    j.entries[0] = -9;
    j.count = 1;
    try testing.expectEqual(@as(?f64, -9), pop(&j));
    try testing.expectEqual(@as(i32, 0), j.count);
    j.count = capacity + 1;
    try testing.expectEqual(@as(?f64, null), pop(&j));
    try testing.expectEqual(@as(i32, capacity + 1), j.count);
}

test "each thread has its own journal" {
    const testing = std.testing;
    local().count = 3;
    defer local().count = 0;
    var seen: i32 = -1;
    const thread = try std.Thread.spawn(.{}, struct {
        fn run(out: *i32) void {
            out.* = local().count;
        }
    }.run, .{&seen});
    thread.join();
    try testing.expectEqual(@as(i32, 0), seen);
}
