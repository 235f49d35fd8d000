//! One executable for the native reliability harnesses, so CI compiles the library in ReleaseSafe
//! once for all of them: `reliability fuzz ...` (fuzz_validator.zig) and `reliability threads ...`
//! (threads.zig). `zig build fuzz -- ...` and `zig build threads -- ...` run it.

const std = @import("std");
const fuzz = @import("fuzz_validator.zig");
const threads = @import("threads.zig");

pub fn main() !void {
    var args = try std.process.argsWithAllocator(std.heap.c_allocator);
    defer args.deinit();
    _ = args.skip();
    const which = args.next() orelse "";
    if (std.mem.eql(u8, which, "fuzz")) return fuzz.run(&args);
    if (std.mem.eql(u8, which, "threads")) return threads.run(&args);
    std.debug.print("usage: reliability fuzz|threads [options]\n", .{});
    std.process.exit(2);
}

test {
    _ = fuzz;
    _ = threads;
}
