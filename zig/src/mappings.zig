//! Which address ranges of this process are readable, writable or code: the import validator asks
//! before it reads a producer's struct, shape or strides, before it calls a deleter, and about the
//! whole data range of every tensor in host memory before any view reads (or writes) it.
//!
//! The kernel answers for one address at a time: the region holding it, with its permissions
//! (Linux 6.11 and later: the PROCMAP_QUERY ioctl of /proc/self/maps, about 0.4-0.7 us at any
//! number of mappings; older Linux: /proc/self/maps read only up to that region; macOS:
//! mach_vm_region_recurse; Windows: VirtualQuery). What it answered is remembered: for each kind of
//! lookup (structs and arrays, data, code) the last few ranges found, in one cache line that every
//! thread reads without a lock and that is written only when a lookup had to ask (a sequence lock
//! per line: readers check that its number was even and unchanged). A hit is a handful of loads,
//! and threads whose tensors lie in different mappings each find theirs without writing anything.
//! A miss asks the kernel without holding any lock.
//!
//! What the cache cannot know: memory unmapped or made inaccessible after it was remembered still
//! counts as it was, until the range leaves the cache (each kind keeps only its last three) or a
//! later answer about any address of it shows other access (such entries are dropped at once, for
//! every thread). Memory that gained access since (made code in place, or mapped again where other
//! memory was: a library loaded again) is never refused on the cache's word: a lookup a remembered
//! range would refuse asks the kernel. (A data range remembered read-only that became writable
//! still reads as read-only, on a hit, until an answer drops it.) Where the kernel cannot be asked
//! at all (no /proc, another OS), every lookup answers yes and the checks are off (`available`).

const std = @import("std");
const builtin = @import("builtin");
const assert = std.debug.assert;

const regions = @import("regions.zig");
const ports = @import("mappings_ports.zig");

pub const perm_read = regions.perm_read;
pub const perm_exec = regions.perm_exec;
pub const perm_write = regions.perm_write;
pub const perms_all = regions.perms_all;
pub const Error = regions.Error;
pub const Region = regions.Region;

/// Regions one lookup walks at most: a range across more mappings than Linux allows a process by
/// default (65530) is refused.
const steps_max: u32 = 1 << 17;

/// What a lookup is for. Each kind remembers its own ranges, so that the data of large tensors
/// (fresh mappings, one after another) never displaces the heap their structs lie in.
pub const Kind = enum(u8) { header, data, code };

const kind_count = @typeInfo(Kind).@"enum".fields.len;
/// Ranges remembered per kind.
const ways = 3;

/// The remembered ranges of one kind, in one cache line: `lo` holds a range's first byte (page
/// aligned) with its permission bits in the low bits, `hi` one past its last byte; an empty slot
/// is all zeros. Read with the sequence lock `guard` (odd while a writer changes a slot).
const Set = struct {
    guard: u64 align(64) = 0,
    /// The slot the next range goes to (round robin); written under the guard.
    cursor: u64 = 0,
    lo: [ways]u64 = @splat(0),
    hi: [ways]u64 = @splat(0),
};

comptime {
    assert(@sizeOf(Set) == 64);
    assert(ways <= 3);
}

var sets: [kind_count]Set = @splat(.{});
/// Set once asking turned out to be impossible: every answer is then yes.
var unavailable = std.atomic.Value(bool).init(false);
/// Queries made (for tests of the cache).
var asked = std.atomic.Value(u64).init(0);
/// Where the fork handler stands: a descriptor a child must not use is kept only once it is
/// registered.
const ForkHandler = enum(u8) { none, registering, registered, failed };
var fork_handler = std.atomic.Value(ForkHandler).init(.none);

/// What `dladdr` says of an address: the loaded binary that holds it, and the nearest symbol.
pub const DlInfo = extern struct {
    fname: ?[*:0]const u8,
    fbase: ?*anyopaque,
    sname: ?[*:0]const u8,
    saddr: ?*anyopaque,
};
pub extern "c" fn dladdr(address: *const anyopaque, info: *DlInfo) c_int;

/// The load address of the loaded binary (the executable or a shared object) that holds
/// `address`, or null: heap, stack, code made at run time, or a platform without `dladdr`.
pub fn binaryOf(address: usize) ?usize {
    if (builtin.os.tag == .windows or address == 0) return null;
    var info: DlInfo = undefined;
    if (dladdr(@ptrFromInt(address), &info) == 0) return null;
    return @intFromPtr(info.fbase orelse return null);
}

/// Whether the checks are on: the platform can be asked (so far).
pub fn available() bool {
    return !unavailable.load(.monotonic);
}

/// How many times the platform was asked about a region (for tests of the cache).
pub fn queries() u64 {
    return asked.load(.monotonic);
}

/// A range of readable memory a lookup found (one remembered range), so that arrays lying inside
/// it need no lookup of their own. Empty unless one range covered the whole lookup.
pub const Span = struct {
    lo: u64 = 0,
    hi: u64 = 0,
    /// The permissions every byte of it has.
    perms: u64 = 0,

    pub fn contains(self: Span, address: usize, len: usize) bool {
        return address >= self.lo and address < self.hi and len <= self.hi - address;
    }
};

/// Whether readable memory covers every byte of [address, address + len).
pub inline fn readable(address: usize, len: usize) bool {
    return lookup(.header, address, len, perm_read, null) != 0;
}

/// `readable`, also setting `span` to the range found when one covers the whole request.
pub inline fn readableSpan(address: usize, len: usize, span: *Span) bool {
    span.* = .{};
    return lookup(.header, address, len, perm_read, span) != 0;
}

/// Whether `address` lies in executable memory. (Whether a function starts there cannot be known.)
pub inline fn executable(address: usize) bool {
    return lookup(.code, address, 1, perm_exec, null) != 0;
}

/// The permissions every byte of the data range [address, address + len) has (`perm_write` set
/// when all of it can be written), or 0 when any byte of it is not readable.
pub inline fn dataAccess(address: usize, len: usize) u64 {
    return lookup(.data, address, len, perm_read, null);
}

/// `dataAccess` of [address, end), a range the caller checked is not empty and does not wrap.
pub inline fn dataRangeAccess(address: u64, end: u64) u64 {
    assert(address < end);
    if (hit(.data, address, end, perm_read)) |e| return e.lo & perms_all;
    return resolve(.data, address, end, perm_read, null);
}

/// The permissions common to [address, address + len), each byte having at least `need`; 0 when
/// one lacks any of `need`. The hot path: a look at the ranges this kind remembers.
inline fn lookup(kind: Kind, address: usize, len: usize, need: u64, span: ?*Span) u64 {
    assert(need != 0 and need & ~perms_all == 0);
    if (len == 0) return perms_all;
    const end = std.math.add(u64, address, len) catch return 0;
    if (hit(kind, address, end, need)) |e| {
        if (span) |s| s.* = .{ .lo = e.lo & ~perms_all, .hi = e.hi, .perms = e.lo & perms_all };
        return e.lo & perms_all;
    }
    return resolve(kind, address, end, need, span);
}

const Entry = struct { lo: u64, hi: u64 };

/// A remembered range of `kind` covering [address, end) with every permission in `need`.
/// Independent loads of one cache line, no search, no write.
inline fn hit(kind: Kind, address: u64, end: u64, need: u64) ?Entry {
    const set = &sets[@intFromEnum(kind)];
    const guard = @atomicLoad(u64, &set.guard, .acquire);
    inline for (0..ways) |i| {
        const lo = @atomicLoad(u64, &set.lo[i], .acquire);
        const hi = @atomicLoad(u64, &set.hi[i], .acquire);
        if (lo & ~perms_all <= address and end <= hi and lo & need == need) {
            // A writer in between: the slow path looks again.
            if (guard & 1 != 0 or @atomicLoad(u64, &set.guard, .acquire) != guard) return null;
            return .{ .lo = lo, .hi = hi };
        }
    }
    return null;
}

/// The regions a lookup walks, merged into runs of equal permissions as they come.
const Walk = struct {
    kind: Kind,
    need: u64,
    common: u64 = perms_all,
    run: ?Region = null,
    /// The first run closed (the span, when it covers the whole lookup).
    first: ?Region = null,

    /// Takes the next region; false when it lacks a permission needed.
    fn take(self: *Walk, region: Region) bool {
        if (region.perms & self.need != self.need) return false;
        self.common &= region.perms;
        if (self.run) |*run| {
            if (run.end == region.start and run.perms == region.perms) {
                run.end = region.end;
                return true;
            }
            self.close();
        }
        self.run = region;
        return true;
    }

    /// Remembers the current run for this kind.
    fn close(self: *Walk) void {
        const run = self.run orelse return;
        remember(self.kind, run);
        if (self.first == null) self.first = run;
        self.run = null;
    }
};

/// The range is not (all) in one remembered range: walk it region by region, each from what any
/// kind remembers or else from the kernel, and remember what was found.
noinline fn resolve(kind: Kind, address: u64, end: u64, need: u64, span: ?*Span) u64 {
    assert(address < end);
    if (unavailable.load(.monotonic)) return perms_all;
    var walk: Walk = .{ .kind = kind, .need = need };
    defer walk.close();
    var at = address;
    var steps: u32 = 0;
    while (steps < steps_max) : (steps += 1) {
        const region = regionAt(at, need) catch |err| return switch (err) {
            error.Unavailable => perms_all,
            error.Inconsistent => 0,
        };
        assert(region.start <= at and at < region.end);
        if (!walk.take(region)) return 0;
        if (region.end >= end) {
            const run = walk.run.?;
            if (walk.first == null and run.start <= address and span != null) {
                span.?.* = .{ .lo = run.start, .hi = run.end, .perms = run.perms };
            }
            return walk.common;
        }
        at = region.end;
    }
    return 0;
}

/// The region holding `at`: what any kind remembers, unless it lacks a permission `need`s (the
/// memory may have gained it since: made code in place, or unmapped and mapped again, as a library
/// loaded again lands where other memory was), else the kernel's answer. A remembered range never
/// refuses by itself; only refusals and misses ask.
fn regionAt(at: u64, need: u64) Error!Region {
    if (rememberedAt(at)) |region| {
        if (region.perms & need == need) return region;
    }
    return ask(at);
}

/// The range any kind remembers holding `at`, as a region.
fn rememberedAt(at: u64) ?Region {
    for (&sets) |*set| {
        const guard = @atomicLoad(u64, &set.guard, .acquire);
        if (guard & 1 != 0) continue;
        for (0..ways) |i| {
            const lo = @atomicLoad(u64, &set.lo[i], .acquire);
            const hi = @atomicLoad(u64, &set.hi[i], .acquire);
            if (lo & ~perms_all > at or at >= hi) continue;
            if (@atomicLoad(u64, &set.guard, .acquire) != guard) break;
            return .{ .start = lo & ~perms_all, .end = hi, .perms = lo & perms_all };
        }
    }
    return null;
}

/// Asks the platform about `at`; drops every remembered range the answer contradicts.
fn ask(at: u64) Error!Region {
    if (fork_handler.load(.acquire) == .none) ensureForkHandler();
    _ = asked.fetchAdd(1, .monotonic);
    const region = try query(at);
    if (region.start > at or at >= region.end) return error.Inconsistent;
    forgetContradicted(region);
    return region;
}

/// Takes a set's sequence lock (a few tries: writers hold it for a few stores, never a call).
fn lockSet(set: *Set) ?u64 {
    var tries: u32 = 0;
    while (tries < 64) : (tries += 1) {
        const guard = @atomicLoad(u64, &set.guard, .monotonic);
        if (guard & 1 == 0) {
            const lost = @cmpxchgWeak(u64, &set.guard, guard, guard + 1, .acquire, .monotonic);
            if (lost == null) return guard;
        }
        std.atomic.spinLoopHint();
    }
    return null;
}

fn unlockSet(set: *Set, guard: u64) void {
    assert(guard & 1 == 0);
    @atomicStore(u64, &set.guard, guard + 2, .release);
}

fn storeSlot(set: *Set, slot: usize, lo: u64, hi: u64) void {
    // Release stores: a reader that sees any new value also sees the odd guard.
    @atomicStore(u64, &set.lo[slot], lo, .release);
    @atomicStore(u64, &set.hi[slot], hi, .release);
}

/// Remembers `run` for `kind`: in the slot of a range it overlaps (the same mapping found again,
/// grown), else in the next slot in turn. Skipped when another writer holds the set.
fn remember(kind: Kind, run: Region) void {
    // Runs start at page boundaries, which leaves the low bits for the permissions.
    if (run.perms == 0 or run.perms & ~perms_all != 0 or run.start & perms_all != 0) return;
    if (run.start >= run.end) return;
    const set = &sets[@intFromEnum(kind)];
    const lo = run.start | run.perms;
    for (0..ways) |i| {
        const same = @atomicLoad(u64, &set.lo[i], .monotonic) == lo and
            @atomicLoad(u64, &set.hi[i], .monotonic) == run.end;
        if (same) return;
    }
    const guard = @atomicLoad(u64, &set.guard, .monotonic);
    if (guard & 1 != 0) return;
    if (@cmpxchgStrong(u64, &set.guard, guard, guard + 1, .acquire, .monotonic) != null) return;
    var slot: usize = set.cursor % ways;
    for (0..ways) |i| {
        if ((set.lo[i] & ~perms_all) < run.end and run.start < set.hi[i]) slot = i;
    }
    if (slot == set.cursor % ways) set.cursor +%= 1;
    storeSlot(set, slot, lo, run.end);
    unlockSet(set, guard);
}

/// Drops every remembered range that claims other access to a byte of `region` than it has: the
/// memory was unmapped, remapped or protected since it was remembered. (Every byte of a
/// remembered range had exactly its permissions, so any difference is a change, more access as
/// much as less: a range left claiming less would make `regionAt` ask every time.)
fn forgetContradicted(region: Region) void {
    for (&sets) |*set| {
        for (0..ways) |i| {
            if (!contradicts(set, i, region)) continue;
            const guard = lockSet(set) orelse continue;
            if (contradicts(set, i, region)) storeSlot(set, i, 0, 0);
            unlockSet(set, guard);
        }
    }
}

fn contradicts(set: *const Set, slot: usize, region: Region) bool {
    const lo = @atomicLoad(u64, &set.lo[slot], .monotonic);
    const hi = @atomicLoad(u64, &set.hi[slot], .monotonic);
    if (hi == 0) return false;
    const overlaps = lo & ~perms_all < region.end and region.start < hi;
    return overlaps and lo & perms_all != region.perms;
}

/// In the child of a fork only the forking thread lives on: a writer another thread was in the
/// middle of would leave its set locked for good, and the kept /proc/self/maps descriptor
/// describes the parent (it names the memory of the process that opened it). Start those over;
/// what the sets remember is the child's memory too.
fn afterFork() callconv(.c) void {
    for (&sets) |*set| {
        const guard = @atomicLoad(u64, &set.guard, .monotonic);
        if (guard & 1 == 0) continue;
        for (0..ways) |i| storeSlot(set, i, 0, 0);
        @atomicStore(u64, &set.guard, guard + 1, .release);
    }
    const fd = maps_fd.load(.monotonic);
    if (fd >= 0) std.posix.close(fd);
    if (fd != fd_listing) maps_fd.store(fd_none, .monotonic);
}

/// Registers `afterFork` once, before any lookup asks (and before a descriptor is kept).
noinline fn ensureForkHandler() void {
    @branchHint(.cold);
    if (fork_handler.cmpxchgStrong(.none, .registering, .acq_rel, .monotonic) != null) return;
    fork_handler.store(if (registerForkHandler()) .registered else .failed, .release);
}

/// Registers `afterFork` through a symbol looked up at run time, so that loading this library never
/// depends on where a libc keeps it: glibc exports `__register_atfork` (its `pthread_atfork` is a
/// static stub, or a compat symbol dlsym does not return), macOS and musl `pthread_atfork`.
fn registerForkHandler() bool {
    if (builtin.os.tag != .linux and builtin.os.tag != .macos) return true;
    const Handler = ?*const fn () callconv(.c) void;
    // RTLD_DEFAULT: NULL with glibc and musl, (void *)-2 on macOS.
    const default_handle: ?*anyopaque = if (builtin.os.tag == .macos) @ptrFromInt(
        std.math.maxInt(usize) - 1,
    ) else null;
    if (std.c.dlsym(default_handle, "__register_atfork")) |symbol| {
        // The last argument names the registering object for dlclose; this library is never
        // unloaded.
        const Register = *const fn (Handler, Handler, Handler, ?*anyopaque) callconv(.c) c_int;
        const register: Register = @ptrCast(@alignCast(symbol));
        return register(null, null, afterFork, null) == 0;
    }
    const symbol = std.c.dlsym(default_handle, "pthread_atfork") orelse return false;
    const atfork: *const fn (Handler, Handler, Handler) callconv(.c) c_int = @ptrCast(
        @alignCast(symbol),
    );
    return atfork(null, null, afterFork) == 0;
}

fn query(at: u64) Error!Region {
    return switch (builtin.os.tag) {
        .linux => queryLinux(at),
        .macos => ports.queryDarwin(at),
        .windows => ports.queryWindows(at),
        else => error.Unavailable,
    };
}

// ---------------------------------------------------------------------------------------------
// Linux: the PROCMAP_QUERY ioctl (6.11 and later), else /proc/self/maps up to the region asked.

/// `struct procmap_query` of linux/fs.h.
const ProcmapQuery = extern struct {
    size: u64,
    query_flags: u64,
    query_addr: u64,
    vma_start: u64,
    vma_end: u64,
    vma_flags: u64,
    vma_page_size: u64,
    vma_offset: u64,
    inode: u64,
    dev_major: u32,
    dev_minor: u32,
    vma_name_size: u32,
    build_id_size: u32,
    vma_name_addr: u64,
    build_id_addr: u64,
};

comptime {
    assert(@sizeOf(ProcmapQuery) == 104);
    assert(@offsetOf(ProcmapQuery, "vma_name_size") == 80);
}

/// `_IOWR('f', 17, struct procmap_query)`.
const procmap_query_request: u32 = 3 << 30 | @sizeOf(ProcmapQuery) << 16 | 'f' << 8 | 17;
/// The covering region, or the next one when the address lies in a gap.
const query_covering_or_next: u64 = 0x10;
const vma_readable: u64 = 0x1;
const vma_writable: u64 = 0x2;
const vma_executable: u64 = 0x4;

comptime {
    assert(procmap_query_request == 0xC0686611);
}

/// The descriptor of /proc/self/maps the ioctl goes through, opened at the first query.
const fd_none: i32 = -1;
/// The kernel has no PROCMAP_QUERY (or no descriptor may be kept): read the listing.
const fd_listing: i32 = -2;
var maps_fd = std.atomic.Value(i32).init(fd_none);
/// Descriptors opened for the ioctl: a few at most, should one stop working (closed by other code).
var fds_opened = std.atomic.Value(u32).init(0);
const fds_max = 4;

fn queryLinux(at: u64) Error!Region {
    var attempt: u32 = 0;
    while (attempt < 2) : (attempt += 1) {
        const fd = mapsFd(attempt > 0);
        if (fd < 0) break;
        return procmapQuery(fd, at) catch |err| switch (err) {
            // A kernel without the ioctl answers so on a fresh descriptor too.
            error.Unsupported => {
                if (attempt > 0) maps_fd.store(fd_listing, .release);
                continue;
            },
            error.Failed => continue,
        };
    }
    return scanListing(at);
}

/// The kept descriptor, opened when there is none (or, with `fresh`, when the kept one failed: it
/// may have been closed and its number reused by other code, so it is left alone, not closed).
/// None (`fd_none`, the listing answers this time) until the fork handler is registered.
fn mapsFd(fresh: bool) i32 {
    const fd = maps_fd.load(.acquire);
    if (fd == fd_listing or (fd >= 0 and !fresh)) return fd;
    switch (fork_handler.load(.acquire)) {
        .registered => {},
        .failed => return fd_listing,
        .none, .registering => return fd_none,
    }
    if (fds_opened.fetchAdd(1, .monotonic) >= fds_max) {
        maps_fd.store(fd_listing, .release);
        return fd_listing;
    }
    const opened = openListing() catch return fd_listing;
    if (maps_fd.cmpxchgStrong(fd, opened, .acq_rel, .acquire)) |other| {
        std.posix.close(opened);
        return other;
    }
    return opened;
}

const QueryError = error{ Unsupported, Failed };

fn openListing() std.posix.OpenError!i32 {
    return std.posix.openZ("/proc/self/maps", .{ .ACCMODE = .RDONLY, .CLOEXEC = true }, 0);
}

fn procmapQuery(fd: i32, at: u64) QueryError!Region {
    var q = std.mem.zeroes(ProcmapQuery);
    q.size = @sizeOf(ProcmapQuery);
    q.query_flags = query_covering_or_next;
    q.query_addr = at;
    var attempt: u32 = 0;
    while (attempt < 8) : (attempt += 1) {
        const rc = std.os.linux.ioctl(fd, procmap_query_request, @intFromPtr(&q));
        switch (std.os.linux.E.init(rc)) {
            .SUCCESS => break,
            // Nothing mapped at or above the address.
            .NOENT => return .{ .start = at, .end = std.math.maxInt(u64), .perms = 0 },
            .INTR, .AGAIN => continue,
            .NOTTY, .INVAL, .OPNOTSUPP, .@"2BIG" => return error.Unsupported,
            else => return error.Failed,
        }
    } else return error.Failed;
    if (q.vma_start > at) return .{ .start = at, .end = q.vma_start, .perms = 0 };
    if (q.vma_end <= at) return error.Failed;
    var perms: u64 = 0;
    if (q.vma_flags & vma_readable != 0) perms |= perm_read;
    if (q.vma_flags & vma_writable != 0) perms |= perm_write;
    if (q.vma_flags & vma_executable != 0) perms |= perm_exec;
    return .{ .start = q.vma_start, .end = q.vma_end, .perms = perms };
}

/// The region holding `at` from /proc/self/maps (kernels before 6.11), read only up to it.
/// Never inlined: its read buffer would otherwise make every lookup's caller probe 4 KiB of stack.
noinline fn scanListing(at: u64) Error!Region {
    @branchHint(.cold);
    var attempt: u32 = 0;
    while (attempt < 3) : (attempt += 1) {
        return readListing(at) catch |err| switch (err) {
            error.Inconsistent => continue,
            error.Unavailable => {
                unavailable.store(true, .monotonic);
                return error.Unavailable;
            },
        };
    }
    return error.Inconsistent;
}

fn readListing(at: u64) Error!Region {
    const fd = openListing() catch |err| return switch (err) {
        error.FileNotFound, error.AccessDenied, error.PermissionDenied => error.Unavailable,
        else => error.Inconsistent,
    };
    defer std.posix.close(fd);
    var buffer: [4096]u8 = undefined;
    var parser = MapsParser{};
    var finder: Finder = .{ .at = at };
    // The listing of the largest process Linux allows is far below this (about 65530 lines).
    var total: usize = 0;
    while (total < 1 << 30) {
        const n = std.posix.read(fd, &buffer) catch return error.Inconsistent;
        if (n == 0) break;
        total += n;
        for (buffer[0..n]) |byte| {
            try parser.feed(byte, &finder);
            if (finder.done) return finder.region();
        }
    }
    try parser.finish();
    return finder.region();
}

/// Follows the listing's lines to the region holding `at`: the run of contiguous lines of equal
/// permissions around it, or the gap it lies in.
const Finder = struct {
    at: u64,
    /// The run of lines before the one holding `at` (it may extend that one's run backwards).
    behind: ?Region = null,
    run: ?Region = null,
    last_end: u64 = 0,
    done: bool = false,

    fn add(self: *Finder, start: u64, end: u64, perms: u64) Error!void {
        if (start >= end or start & perms_all != 0) return error.Unavailable;
        // Lines come in address order; anything else is a listing that changed while read.
        if (start < self.last_end) return error.Inconsistent;
        self.last_end = end;
        const line: Region = .{ .start = start, .end = end, .perms = perms };
        if (self.run) |*run| {
            if (continues(run.*, line)) run.end = end else self.done = true;
            return;
        }
        if (end <= self.at) {
            if (self.behind) |*behind| {
                if (continues(behind.*, line)) {
                    behind.end = end;
                    return;
                }
            }
            self.behind = line;
            return;
        }
        if (start > self.at) {
            self.run = .{ .start = self.at, .end = start, .perms = 0 };
            self.done = true;
            return;
        }
        self.run = line;
        if (self.behind) |behind| {
            if (continues(behind, line)) self.run.?.start = behind.start;
        }
    }

    fn continues(run: Region, line: Region) bool {
        return line.start == run.end and line.perms == run.perms;
    }

    fn region(self: *const Finder) Region {
        return self.run orelse .{ .start = self.at, .end = std.math.maxInt(u64), .perms = 0 };
    }
};

/// A streaming parser for the first two fields of each line of /proc/self/maps ("start-end perms
/// offset dev inode [path]"); the rest of a line is skipped, so a path of any length costs
/// nothing. Each line goes to `out.add(start, end, perms)`.
const MapsParser = struct {
    state: enum { start, end, perms, skip } = .start,
    value: u64 = 0,
    digits: u32 = 0,
    start: u64 = 0,
    end: u64 = 0,
    perms: u64 = 0,
    perm_index: u32 = 0,

    fn feed(self: *MapsParser, byte: u8, out: anytype) Error!void {
        switch (self.state) {
            .start, .end => {
                if (hexDigit(byte)) |d| {
                    if (self.digits == 16) return error.Unavailable;
                    self.value = self.value << 4 | d;
                    self.digits += 1;
                    return;
                }
                if (self.state == .start and byte == '\n' and self.digits == 0) return;
                if (self.digits == 0) return error.Unavailable;
                if (self.state == .start and byte == '-') {
                    self.start = self.value;
                    self.state = .end;
                } else if (self.state == .end and byte == ' ') {
                    self.end = self.value;
                    self.state = .perms;
                    self.perms = 0;
                    self.perm_index = 0;
                } else return error.Unavailable;
                self.value = 0;
                self.digits = 0;
            },
            .perms => try self.feedPerm(byte, out),
            .skip => if (byte == '\n') {
                self.state = .start;
            },
        }
    }

    fn feedPerm(self: *MapsParser, byte: u8, out: anytype) Error!void {
        const expected = "rwx"[0..];
        const bits = [_]u64{ perm_read, perm_write, perm_exec };
        if (self.perm_index < 3) {
            if (byte == expected[self.perm_index]) {
                self.perms |= bits[self.perm_index];
            } else if (byte != '-') return error.Unavailable;
            self.perm_index += 1;
            return;
        }
        if (byte != 'p' and byte != 's') return error.Unavailable;
        self.state = .skip;
        try out.add(self.start, self.end, self.perms);
    }

    fn finish(self: *const MapsParser) Error!void {
        if (self.state != .start and self.state != .skip) return error.Inconsistent;
    }
};

fn hexDigit(byte: u8) ?u64 {
    return switch (byte) {
        '0'...'9' => byte - '0',
        'a'...'f' => byte - 'a' + 10,
        'A'...'F' => byte - 'A' + 10,
        else => null,
    };
}

// ---------------------------------------------------------------------------------------------
// Tests

const testing = std.testing;

const fresh_pages = @import("fresh_pages.zig");
const freshRegion = fresh_pages.freshRegion;
const freshPages = fresh_pages.freshPages;
const unmapped = fresh_pages.unmapped;

/// Collects every line the parser emits (for the parser's tests).
const ListSink = struct {
    list: std.ArrayList(Region) = .empty,

    fn add(self: *ListSink, start: u64, end: u64, perms: u64) Error!void {
        self.list.append(
            std.heap.raw_c_allocator,
            .{ .start = start, .end = end, .perms = perms },
        ) catch return error.Inconsistent;
    }
};

fn parseForTest(text: []const u8, out: anytype) Error!void {
    var parser = MapsParser{};
    for (text) |byte| try parser.feed(byte, out);
    try parser.finish();
}

const sample_listing = "1000-2000 r--p 00000000 08:01 12 /usr/lib/a.so\n" ++
    "2000-3000 r--p 00001000 08:01 12 /usr/lib/a.so\n" ++
    "3000-5000 r-xp 00002000 08:01 12 /usr/lib/a.so\n" ++
    "5000-6000 ---p 00000000 00:00 0 \n" ++
    "7fff0000-7fff1000 rw-s 00000000 00:00 0                          [stack]\n" ++
    "ffffffffff600000-ffffffffff601000 --xp 00000000 00:00 0          [vsyscall]";

test "the maps parser reads every line's range and permissions" {
    var sink: ListSink = .{};
    defer sink.list.deinit(std.heap.raw_c_allocator);
    try parseForTest(sample_listing, &sink);
    const items = sink.list.items;
    try testing.expectEqual(@as(usize, 6), items.len);
    try testing.expectEqual(Region{ .start = 0x1000, .end = 0x2000, .perms = perm_read }, items[0]);
    try testing.expectEqual(perm_read | perm_exec, items[2].perms);
    try testing.expectEqual(@as(u64, 0), items[3].perms);
    try testing.expectEqual(perm_read | perm_write, items[4].perms);
    try testing.expectEqual(perm_exec, items[5].perms);
}

test "the maps parser refuses what it does not understand" {
    var sink: ListSink = .{};
    defer sink.list.deinit(std.heap.raw_c_allocator);
    const bad = [_][]const u8{
        "1000 r--p\n",
        "1000-2000 rq-p 0 0:0 0\n",
        "10000000000000000-10000000000000001 r--p 0 0:0 0\n",
        "-2000 r--p 0 0:0 0\n",
    };
    for (bad) |text| try testing.expectError(error.Unavailable, parseForTest(text, &sink));
    try testing.expectError(error.Inconsistent, parseForTest("1000-2000 r-", &sink));
    var finder: Finder = .{ .at = 0x1500 };
    try testing.expectError(error.Unavailable, parseForTest("2000-1000 r--p 0 0:0 0\n", &finder));
    finder = .{ .at = 0x1500 };
    try testing.expectError(error.Unavailable, parseForTest("1001-2000 r--p 0 0:0 0\n", &finder));
    finder = .{ .at = 0x1500 };
    const unordered = "3000-4000 r--p 0 0:0 0\n1000-2000 r--p 0 0:0 0\n";
    try testing.expectError(error.Inconsistent, parseForTest(unordered, &finder));
}

test "the listing's region around an address: runs of equal permissions, gaps, the end" {
    const cases = [_]struct { at: u64, want: Region }{
        .{ .at = 0x1800, .want = .{ .start = 0x1000, .end = 0x3000, .perms = perm_read } },
        .{ .at = 0x2fff, .want = .{ .start = 0x1000, .end = 0x3000, .perms = perm_read } },
        .{ .at = 0x2000, .want = .{ .start = 0x1000, .end = 0x3000, .perms = perm_read } },
        .{ .at = 0x3000, .want = .{ .start = 0x3000, .end = 0x5000, .perms = 3 } },
        .{ .at = 0x5800, .want = .{ .start = 0x5000, .end = 0x6000, .perms = 0 } },
        .{ .at = 0x6000, .want = .{ .start = 0x6000, .end = 0x7fff0000, .perms = 0 } },
        .{ .at = 0x10, .want = .{ .start = 0x10, .end = 0x1000, .perms = 0 } },
        .{ .at = 0x7fff0000, .want = .{ .start = 0x7fff0000, .end = 0x7fff1000, .perms = 5 } },
        .{ .at = 0xffffffffff600000 - 1, .want = .{
            .start = 0xffffffffff600000 - 1,
            .end = 0xffffffffff600000,
            .perms = 0,
        } },
        .{ .at = 0xffffffffff601000, .want = .{
            .start = 0xffffffffff601000,
            .end = std.math.maxInt(u64),
            .perms = 0,
        } },
    };
    for (cases) |c| {
        var finder: Finder = .{ .at = c.at };
        var parser = MapsParser{};
        for (sample_listing) |byte| {
            try parser.feed(byte, &finder);
            if (finder.done) break;
        }
        try testing.expectEqual(c.want, finder.region());
    }
}

test "this process: heap, stack and code are found; unmapped and PROT_NONE pages are not" {
    if (builtin.os.tag != .linux) return error.SkipZigTest;
    const heap = (try std.heap.raw_c_allocator.alloc(u8, 64)).ptr;
    defer std.heap.raw_c_allocator.free(heap[0..64]);
    var local: u64 = 7;
    try testing.expect(readable(@intFromPtr(heap), 64));
    try testing.expect(readable(@intFromPtr(&local), 8));
    try testing.expect(executable(@intFromPtr(&queries)));
    try testing.expect(!readable(0, 8));
    try testing.expect(!readable(std.math.maxInt(usize) - 7, 16));
    try testing.expect(!readable((1 << 47) - 4096, 8));
    try testing.expect(dataAccess(@intFromPtr(&local), 8) & perm_write != 0);

    const page = std.heap.page_size_min;
    const prot = std.posix.PROT;
    const rw = prot.READ | prot.WRITE;
    const region = try freshPages(&.{ rw, prot.NONE, rw, unmapped, prot.READ });
    defer std.posix.munmap(region);
    const base = @intFromPtr(region.ptr);
    // (Not the heap for "not code": valgrind maps its malloc arena read-write-execute.)
    try testing.expect(readable(base, page));
    try testing.expect(!readable(base + page, 8));
    try testing.expect(!readable(base + page - 8, 16));
    try testing.expect(readable(base + 2 * page, 8));
    try testing.expect(!readable(base + 2 * page, page + 8));
    try testing.expect(!readable(base + 3 * page, 8));
    try testing.expect(!executable(base));
    try testing.expectEqual(perm_read | perm_write, dataAccess(base + 8, page - 8));
    try testing.expectEqual(perm_read, dataAccess(base + 4 * page, page));
    try testing.expectEqual(@as(u64, 0), dataAccess(base + 8, page));
    try testing.expectEqual(@as(u64, 0), dataAccess(base + 3 * page + 8, page));
}

test "a range across mappings of different permissions has the ones they share" {
    if (builtin.os.tag != .linux) return error.SkipZigTest;
    const page = std.heap.page_size_min;
    const prot = std.posix.PROT;
    const region = try freshPages(&.{ prot.READ | prot.WRITE, prot.READ, prot.READ | prot.WRITE });
    defer std.posix.munmap(region);
    const base = @intFromPtr(region.ptr);
    try testing.expectEqual(perm_read, dataAccess(base, 3 * page));
    try testing.expectEqual(perm_read, dataAccess(base + page - 8, 16));
    try testing.expectEqual(perm_read | perm_write, dataAccess(base + 2 * page, 8));
    // Answered from what the walks remembered: no query.
    const before = queries();
    try testing.expectEqual(perm_read, dataAccess(base, 3 * page));
    try testing.expectEqual(before, queries());
}

test "hits do not ask again" {
    if (builtin.os.tag != .linux) return error.SkipZigTest;
    const heap = (try std.heap.raw_c_allocator.alloc(u8, 64)).ptr;
    defer std.heap.raw_c_allocator.free(heap[0..64]);
    try testing.expect(readable(@intFromPtr(heap), 64));
    try testing.expect(executable(@intFromPtr(&queries)));
    const before = queries();
    for (0..10_000) |_| {
        try testing.expect(readable(@intFromPtr(heap), 64));
        try testing.expect(executable(@intFromPtr(&queries)));
    }
    try testing.expectEqual(before, queries());
}

test "a remembered range an answer contradicts is dropped for every kind" {
    if (builtin.os.tag != .linux) return error.SkipZigTest;
    const page = std.heap.page_size_min;
    const region = try freshRegion(2);
    defer std.posix.munmap(region);
    const base = @intFromPtr(region.ptr);
    var span: Span = .{};
    try testing.expect(readableSpan(base, 8, &span));
    try testing.expect(span.contains(base, 2 * page));
    try testing.expect(dataAccess(base + page, 8) != 0);
    // Made inaccessible: still remembered (what the cache cannot notice by itself)...
    try std.posix.mprotect(@alignCast(region[page..]), std.posix.PROT.NONE);
    try testing.expect(readable(base + page, 8));
    // ...until an answer about any of its bytes says otherwise.
    _ = try ask(base + page);
    try testing.expect(!readableSpan(base + page, 8, &span));
    try testing.expectEqual(Span{}, span);
    try testing.expectEqual(@as(u64, 0), dataAccess(base + page, 8));
    try testing.expect(readable(base, 8));
}

test "memory that gained access since it was remembered is asked about again, not refused" {
    if (builtin.os.tag != .linux) return error.SkipZigTest;
    const page = std.heap.page_size_min;
    const prot = std.posix.PROT;
    const region = try freshPages(&.{ prot.READ | prot.WRITE, prot.READ, prot.READ });
    defer std.posix.munmap(region);
    const base = @intFromPtr(region.ptr);
    // Remembered as data: read-write, then read-only.
    try testing.expect(readable(base, 8));
    try testing.expectEqual(perm_read, dataAccess(base + page, 8));
    try testing.expectEqual(perm_read, dataAccess(base + 2 * page, 8));
    // Made code in place (what a JIT does)...
    try std.posix.mprotect(@alignCast(region[0..page]), prot.READ | prot.EXEC);
    // ...and unmapped, then mapped again as code (a library loaded again, at another address,
    // where other memory was): what the remembered ranges say of it is less than it has now.
    std.posix.munmap(@alignCast(region[page .. 2 * page]));
    const again = try std.posix.mmap(
        @ptrFromInt(base + page),
        page,
        prot.READ | prot.EXEC,
        .{ .TYPE = .PRIVATE, .ANONYMOUS = true, .FIXED = true },
        -1,
        0,
    );
    try testing.expectEqual(base + page, @intFromPtr(again.ptr));
    try testing.expect(executable(base));
    try testing.expect(executable(base + page + 8));
    // Each answer dropped the range it contradicts: the next lookups hit.
    const before = queries();
    try testing.expect(executable(base + 16));
    try testing.expect(executable(base + page));
    try testing.expect(readable(base + page, 8));
    try testing.expectEqual(before, queries());
    // What still lacks access is still refused.
    try testing.expect(!executable(base + 2 * page));
    try testing.expectEqual(perm_read, dataAccess(base + 2 * page, 8));
}

test "the listing and the ioctl agree" {
    if (builtin.os.tag != .linux) return error.SkipZigTest;
    const page = std.heap.page_size_min;
    const prot = std.posix.PROT;
    const region = try freshPages(&.{ prot.READ | prot.WRITE, prot.NONE, prot.READ | prot.WRITE });
    defer std.posix.munmap(region);
    const base = @intFromPtr(region.ptr);
    var local: u64 = 0;
    const addresses = [_]u64{ base, base + page, base + 2 * page + 8, base + 3 * page, 16 };
    const more = [_]u64{ @intFromPtr(&local), @intFromPtr(&queries), 1 << 47 };
    for (addresses ++ more) |at| {
        const listed = try scanListing(at);
        try testing.expect(listed.start <= at and at < listed.end);
        const fd = mapsFd(false);
        if (fd < 0) continue;
        const asked_region = procmapQuery(fd, at) catch continue;
        // The listing merges neighbours of equal permissions; the ioctl answers one mapping (and
        // the listing's [vsyscall] line is no mapping to it: gaps may end elsewhere).
        try testing.expectEqual(listed.perms, asked_region.perms);
        if (listed.perms == 0) continue;
        try testing.expect(listed.start <= asked_region.start and asked_region.end <= listed.end);
    }
}

/// Test support: forgets every remembered range, so that the next lookups ask.
fn forgetAll() void {
    for (&sets) |*set| {
        const guard = lockSet(set) orelse continue;
        for (0..ways) |i| storeSlot(set, i, 0, 0);
        unlockSet(set, guard);
    }
}

test "without the ioctl (kernels before 6.11) the listing answers alike" {
    if (builtin.os.tag != .linux) return error.SkipZigTest;
    const kept = maps_fd.swap(fd_listing, .acq_rel);
    defer maps_fd.store(kept, .release);
    forgetAll();
    defer forgetAll();
    const page = std.heap.page_size_min;
    const prot = std.posix.PROT;
    const rw = prot.READ | prot.WRITE;
    const region = try freshPages(&.{ rw, prot.NONE, rw, prot.READ });
    defer std.posix.munmap(region);
    const base = @intFromPtr(region.ptr);
    var local: u64 = 0;
    try testing.expect(readable(@intFromPtr(&local), 8));
    try testing.expect(executable(@intFromPtr(&queries)));
    try testing.expectEqual(perm_read | perm_write, dataAccess(base, page));
    try testing.expect(!readable(base + page - 8, 16));
    try testing.expect(!readable(16, 8));
    try testing.expectEqual(perm_read, dataAccess(base + 2 * page, 2 * page));
    try testing.expectEqual(@as(u64, 0), dataAccess(base + 3 * page, 2 * page));
}

test "lookups from many threads while others map new memory" {
    if (builtin.os.tag != .linux) return error.SkipZigTest;
    const Worker = struct {
        fn look(heap: usize, failures: *std.atomic.Value(u32)) void {
            for (0..20_000) |_| {
                const code = @intFromPtr(&queries);
                if (!readable(heap, 64) or !executable(code)) _ = failures.fetchAdd(1, .monotonic);
            }
        }
        fn miss(failures: *std.atomic.Value(u32)) void {
            for (0..200) |_| {
                const region = freshRegion(1) catch return;
                defer std.posix.munmap(region);
                const at = @intFromPtr(region.ptr);
                if (dataAccess(at, 64) & perm_write == 0) _ = failures.fetchAdd(1, .monotonic);
                if (readable(at + (1 << 20), 8)) _ = failures.fetchAdd(1, .monotonic);
            }
        }
    };
    const heap = (try std.heap.raw_c_allocator.alloc(u8, 64)).ptr;
    defer std.heap.raw_c_allocator.free(heap[0..64]);
    var failures = std.atomic.Value(u32).init(0);
    var threads: [4]std.Thread = undefined;
    for (threads[0..3]) |*t| t.* = try std.Thread.spawn(
        .{},
        Worker.look,
        .{ @intFromPtr(heap), &failures },
    );
    threads[3] = try std.Thread.spawn(.{}, Worker.miss, .{&failures});
    for (threads) |t| t.join();
    try testing.expectEqual(@as(u32, 0), failures.load(.monotonic));
}

test "a forked child asks about its own memory" {
    // Under valgrind each child's exit is a leak check (of the thread it does not have) that fails.
    if (builtin.os.tag != .linux or std.valgrind.runningOnValgrind() > 0) return error.SkipZigTest;
    const Asker = struct {
        fn run(stop: *std.atomic.Value(bool)) void {
            var k: usize = 0;
            while (!stop.load(.acquire)) : (k +%= 1) _ = readable(
                0x3f00_0000_0000 + (k % 1024) * 4096,
                8,
            );
        }
    };
    const heap = (try std.heap.raw_c_allocator.alloc(u8, 64)).ptr;
    defer std.heap.raw_c_allocator.free(heap[0..64]);
    try testing.expect(readable(@intFromPtr(heap), 64));
    var stop = std.atomic.Value(bool).init(false);
    const thread = try std.Thread.spawn(.{}, Asker.run, .{&stop});
    defer {
        stop.store(true, .release);
        thread.join();
    }
    for (0..20) |_| try expectChildSees(@intFromPtr(heap));
}

/// Forks a child that maps a page of its own (the parent never has it) and must find it.
fn expectChildSees(heap: usize) !void {
    const pid = try std.posix.fork();
    if (pid == 0) {
        const region = freshRegion(1) catch std.posix.exit(2);
        const ok = readable(@intFromPtr(region.ptr), 8) and readable(heap, 64) and
            !readable(0x3f80_0000_0000, 8);
        std.posix.exit(if (ok) 0 else 1);
    }
    var waited: usize = 0;
    const status = while (waited < 500) : (waited += 1) {
        const result = std.posix.waitpid(pid, std.posix.W.NOHANG);
        if (result.pid == pid) break result.status;
        std.Thread.sleep(10 * std.time.ns_per_ms);
    } else {
        std.posix.kill(pid, std.posix.SIG.KILL) catch {};
        _ = std.posix.waitpid(pid, 0);
        return error.ChildHung;
    };
    try testing.expect(std.posix.W.IFEXITED(status) and std.posix.W.EXITSTATUS(status) == 0);
}
