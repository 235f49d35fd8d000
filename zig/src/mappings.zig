//! Which address ranges of this process are readable, and which hold code: the import validator
//! asks before it reads a producer's struct, shape or strides, and before it calls a deleter.
//!
//! The answer comes from a table of the process's mappings (Linux: /proc/self/maps; macOS:
//! mach_vm_region_recurse; Windows: VirtualQuery), sorted, with adjacent ranges of equal
//! permissions merged and ranges that are neither readable nor executable left out. A lookup is a
//! binary search, after a look at a copy of the entry the last lookup found (what repeated imports
//! from one producer hit), valid while the table is unchanged since.
//! The table is read again only when an address is not covered by it; that read must have started
//! after the lookup did, so memory mapped just before a call is always found.
//!
//! Thread safety without a lock on the hit path: a sequence lock. Readers load the sequence
//! number, search, and check that it did not change (a refresh in between makes them search
//! again); the one refresher at a time (a mutex) makes it odd while it rewrites the table in
//! place. A table too small for a refresh is replaced by one with room to spare; replaced tables
//! stay allocated (a reader may still be searching them) and are never written again. Capacity
//! grows geometrically up to `entries_max`, so all tables together stay within about twice the
//! largest.
//!
//! What the table cannot know: memory unmapped after the table was last read still counts as
//! mapped until an address outside the table makes it read again. Where the table cannot be built
//! at all (no /proc, another OS), `covers` answers true and the checks are off (`available`).

const std = @import("std");
const builtin = @import("builtin");
const assert = std.debug.assert;

pub const perm_read: u64 = 1;
pub const perm_exec: u64 = 2;
const perms_mask: u64 = perm_read | perm_exec;

/// Merged ranges at most; a process with more turns the checks off rather than refuse good
/// addresses (Linux allows 65530 mappings by default).
pub const entries_max: usize = 1 << 18;
const capacity_min: usize = 1024;
/// Regions a macOS or Windows walk visits at most (free and reserved ones count there too).
const steps_max: usize = 1 << 22;

pub const Error = error{
    /// The platform offers no listing (no /proc, an unknown OS, a format this parser does not
    /// know).
    Unavailable,
    /// The listing changed while it was read (entries out of order): read it again.
    Inconsistent,
    OutOfMemory,
};

/// One merged range: its first byte with the permission bits in the low bits (ranges are page
/// aligned), and one past its last byte.
const Entry = extern struct {
    lo: u64,
    hi: u64,

    fn start(self: Entry) u64 {
        return self.lo & ~perms_mask;
    }
};

comptime {
    assert(@sizeOf(Entry) == 16);
}

const Table = struct {
    capacity: usize,
    /// Read and written atomically (readers may race a refresh).
    len: usize,
    entries: [*]Entry,
};

/// Even while no refresh writes the current table; odd during one.
var sequence = std.atomic.Value(u64).init(0);
var current = std.atomic.Value(?*Table).init(null);
/// A copy of the entry the last readable and the last executable lookup found, with the table's
/// sequence number it was found at: the hit path reads it without following the table pointer
/// (a chain of three dependent loads). The copy has a sequence lock of its own (odd while it is
/// written; a writer that finds it odd or loses the race to make it odd leaves it), so a reader
/// never takes a torn copy for an entry.
const Remembered = struct {
    guard: std.atomic.Value(u64) = .init(0),
    lo: std.atomic.Value(u64) = .init(0),
    hi: std.atomic.Value(u64) = .init(0),
    /// The table's (even) sequence number when the entry was found; odd: nothing remembered.
    found_at: std.atomic.Value(u64) = .init(1),
};
var remembered = [2]Remembered{ .{}, .{} };
/// Held by the one thread that refreshes; readers never take it on a hit.
var refresh_lock: std.Thread.Mutex = .{};
/// Counts reads of the listing started; `table_epoch` is the count of the read the table holds.
var read_epoch = std.atomic.Value(u64).init(0);
var table_epoch = std.atomic.Value(u64).init(0);
/// Set once the listing turned out to be unavailable: every answer is then true.
var unavailable = std.atomic.Value(bool).init(false);
/// Tables replaced by larger ones: kept (a reader may still search them), never written again.
var retired: [24]?*Table = [_]?*Table{null} ** 24;
var retired_count: usize = 0;
/// The builder's buffer, reused by every refresh (only under `refresh_lock`).
var scratch: std.ArrayList(Entry) = .empty;
/// Whether the fork handler is registered (before the lock is first taken).
var fork_handler = std.atomic.Value(bool).init(false);

/// In the child of a fork, only the forking thread lives on: a refresh another thread was making
/// would hold the lock forever and leave the table half written. Start over with a fresh lock and
/// no table (the old one stays allocated; the child's mappings are the parent's, read anew).
fn afterFork() callconv(.c) void {
    refresh_lock = .{};
    const seq = sequence.load(.monotonic);
    if (seq & 1 != 0) {
        current.store(null, .monotonic);
        sequence.store(seq + 1, .monotonic);
    }
    table_epoch.store(0, .monotonic);
    // A writer another thread was in the middle of would leave its guard odd for good.
    for (&remembered) |*r| {
        r.found_at.store(1, .monotonic);
        r.guard.store(0, .monotonic);
    }
}

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

/// Whether the checks are on: the process's mappings could be listed (so far).
pub fn available() bool {
    return !unavailable.load(.monotonic);
}

/// How many times the listing was read (for tests of the cache).
pub fn refreshes() u64 {
    return read_epoch.load(.monotonic);
}

/// A range of readable memory a lookup found (one merged mapping), so that arrays lying inside it
/// need no lookup of their own. Empty unless the lookup hit the remembered entry.
pub const Span = struct {
    lo: u64 = 0,
    hi: u64 = 0,

    pub fn contains(self: Span, address: usize, len: usize) bool {
        return address >= self.lo and address < self.hi and len <= self.hi - address;
    }
};

/// Whether a readable mapping covers every byte of [address, address + len).
pub fn readable(address: usize, len: usize) bool {
    return covers(address, len, perm_read);
}

/// `readable`, also setting `span` to the mapping found when the lookup took the fast path.
pub fn readableSpan(address: usize, len: usize, span: *Span) bool {
    span.* = .{};
    if (len == 0) return true;
    const end = std.math.add(u64, address, len) catch return false;
    if (hit(address, end, perm_read, span)) return true;
    return coversSlow(address, end, perm_read);
}

/// Whether `address` lies in executable memory. (Whether a function starts there cannot be known.)
pub fn executable(address: usize) bool {
    return covers(address, 1, perm_exec);
}

/// Whether mappings with every permission in `perms` cover [address, address + len). Looks in the
/// table; on a miss reads the listing again (once) and looks again.
pub fn covers(address: usize, len: usize, perms: u64) bool {
    assert(perms != 0 and perms & ~perms_mask == 0);
    if (len == 0) return true;
    const end = std.math.add(u64, address, len) catch return false;
    if (hit(address, end, perms, null)) return true;
    return coversSlow(address, end, perms);
}

fn rememberedFor(perms: u64) *Remembered {
    return &remembered[if (perms & perm_exec != 0) 1 else 0];
}

/// The hot path: the entry the last lookup of this kind found covers the range (repeated imports
/// from one producer), and the table has not been refreshed since it was found there, so the
/// table still holds it. Independent loads, no search.
inline fn hit(address: u64, end: u64, perms: u64, span: ?*Span) bool {
    const r = rememberedFor(perms);
    const guard = r.guard.load(.acquire);
    const e: Entry = .{ .lo = r.lo.load(.acquire), .hi = r.hi.load(.acquire) };
    const found_at = r.found_at.load(.acquire);
    if (e.start() > address or end > e.hi or e.lo & perms != perms) return false;
    if (guard & 1 != 0 or r.guard.load(.acquire) != guard) return false;
    // Equal only while the table is not being rewritten (`found_at` is even).
    if (sequence.load(.acquire) != found_at) return false;
    if (span) |s| s.* = .{ .lo = e.start(), .hi = e.hi };
    return true;
}

/// Remembers `e`, found in the table at sequence number `seen` (checked unchanged after the
/// search), for `hit`. Skipped when another thread is writing the copy.
fn remember(perms: u64, e: Entry, seen: u64) void {
    assert(seen & 1 == 0);
    const r = rememberedFor(perms);
    const guard = r.guard.load(.monotonic);
    if (guard & 1 != 0) return;
    if (r.found_at.load(.monotonic) == seen and r.lo.load(.monotonic) == e.lo and
        r.hi.load(.monotonic) == e.hi) return;
    if (r.guard.cmpxchgStrong(guard, guard + 1, .acquire, .monotonic) != null) return;
    // Release stores: a reader that sees any new value also sees the odd guard.
    r.lo.store(e.lo, .release);
    r.hi.store(e.hi, .release);
    r.found_at.store(seen, .release);
    r.guard.store(guard + 2, .release);
}

/// A search of the whole table, and on a miss a fresh read of the listing and another search.
noinline fn coversSlow(address: u64, end: u64, perms: u64) bool {
    const began = read_epoch.load(.acquire);
    var refreshed = false;
    var attempt: u32 = 0;
    while (attempt < 4) : (attempt += 1) {
        const seen = sequence.load(.acquire);
        if (seen & 1 == 0) {
            if (current.load(.acquire)) |table| {
                const found = search(table, address, end, perms);
                if (sequence.load(.acquire) == seen) {
                    if (found) |e| remember(perms, e, seen);
                    if (found != null or refreshed) return found != null;
                }
            }
        }
        if (unavailable.load(.monotonic)) return true;
        refreshed = refresh(began);
    }
    return false;
}

fn entryAt(table: *const Table, index: usize) Entry {
    return .{
        .lo = @atomicLoad(u64, &table.entries[index].lo, .acquire),
        .hi = @atomicLoad(u64, &table.entries[index].hi, .acquire),
    };
}

/// Searches one table. Safe on a table a refresh is rewriting: indices stay below its capacity and
/// every loop is bounded; the caller discards the answer when the sequence moved.
fn search(table: *const Table, address: u64, end: u64, perms: u64) ?Entry {
    const len = @min(@atomicLoad(usize, &table.len, .acquire), table.capacity);
    // The last entry starting at or below the address.
    var lo: usize = 0;
    var hi: usize = len;
    while (lo < hi) {
        const mid = lo + (hi - lo) / 2;
        if (entryAt(table, mid).start() <= address) lo = mid + 1 else hi = mid;
    }
    if (lo == 0) return null;
    const first = lo - 1;
    // A range may run on into the next entries (a struct across two mappings).
    var reached = address;
    var index = first;
    while (index < len) : (index += 1) {
        const e = entryAt(table, index);
        if (e.start() > reached or e.hi <= reached or e.lo & perms != perms) return null;
        reached = e.hi;
        // The entry holding the first byte is what `hit` will try next time.
        if (reached >= end) return entryAt(table, first);
    }
    return null;
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

/// Makes the table one whose listing was read after `began`; returns whether it is. Never inlined:
/// its read buffer would otherwise make every lookup's caller probe 16 KiB of stack.
noinline fn refresh(began: u64) bool {
    @branchHint(.cold);
    // Before the lock: a fork must never find it held without the handler that resets it.
    const registering = !fork_handler.load(.acquire) and
        fork_handler.cmpxchgStrong(false, true, .acq_rel, .monotonic) == null;
    if (registering) {
        if (!registerForkHandler()) fork_handler.store(false, .release);
    }
    refresh_lock.lock();
    defer refresh_lock.unlock();
    if (table_epoch.load(.monotonic) > began) return true;
    const epoch = read_epoch.fetchAdd(1, .acq_rel) + 1;
    var attempt: u32 = 0;
    while (attempt < 3) : (attempt += 1) {
        scratch.clearRetainingCapacity();
        collect(&scratch) catch |err| switch (err) {
            error.Inconsistent => continue,
            error.Unavailable => {
                unavailable.store(true, .monotonic);
                return false;
            },
            error.OutOfMemory => return false,
        };
        publish(scratch.items) catch return false;
        table_epoch.store(epoch, .monotonic);
        return true;
    }
    return false;
}

/// Writes `entries` into the current table (inside the sequence lock), or into a new, larger one.
fn publish(entries: []const Entry) error{OutOfMemory}!void {
    // Built in address order, each range non-empty, page aligned and readable or executable,
    // neighbours of equal permissions merged: what a binary search over `start` relies on.
    for (entries, 0..) |e, i| {
        assert(e.start() < e.hi);
        assert(e.lo & perms_mask != 0);
        if (i > 0) assert(entries[i - 1].hi <= e.start());
    }
    assert(entries.len <= entries_max);
    const old = current.load(.monotonic);
    var table = old;
    if (old == null or old.?.capacity < entries.len) {
        if (retired_count == retired.len) return error.OutOfMemory;
        const wanted = @max(
            entries.len + entries.len / 2,
            capacity_min,
            if (old) |o| 2 * o.capacity else 0,
        );
        const fresh = std.heap.raw_c_allocator.create(Table) catch return error.OutOfMemory;
        const slots = std.heap.raw_c_allocator.alloc(Entry, wanted) catch {
            std.heap.raw_c_allocator.destroy(fresh);
            return error.OutOfMemory;
        };
        fresh.* = .{ .capacity = wanted, .len = 0, .entries = slots.ptr };
        table = fresh;
    }
    const t = table.?;
    assert(t.capacity >= entries.len);
    const seq = sequence.load(.monotonic);
    // Only the refresher writes the sequence, and it leaves it even.
    assert(seq & 1 == 0);
    sequence.store(seq + 1, .monotonic);
    // Release stores: a reader that sees any new value also sees the odd sequence number.
    for (entries, 0..) |e, i| {
        @atomicStore(u64, &t.entries[i].lo, e.lo, .release);
        @atomicStore(u64, &t.entries[i].hi, e.hi, .release);
    }
    @atomicStore(usize, &t.len, entries.len, .release);
    if (t != old) {
        current.store(t, .release);
        if (old) |o| {
            retired[retired_count] = o;
            retired_count += 1;
        }
    }
    sequence.store(seq + 2, .release);
}

/// Appends ranges in address order, merging neighbours of equal permissions.
const Builder = struct {
    list: *std.ArrayList(Entry),

    fn add(self: Builder, start: u64, end: u64, perms: u64) Error!void {
        if (start >= end or start & perms_mask != 0) return error.Unavailable;
        if (perms == 0) return;
        const items = self.list.items;
        if (items.len > 0) {
            const last = &items[items.len - 1];
            if (start < last.hi) return error.Inconsistent;
            if (start == last.hi and last.lo & perms_mask == perms) {
                last.hi = end;
                return;
            }
        }
        if (items.len == entries_max) return error.Unavailable;
        self.list.append(
            std.heap.raw_c_allocator,
            .{ .lo = start | perms, .hi = end },
        ) catch return error.OutOfMemory;
    }
};

fn collect(list: *std.ArrayList(Entry)) Error!void {
    const builder = Builder{ .list = list };
    switch (builtin.os.tag) {
        .linux => try collectLinux(builder),
        .macos => try collectDarwin(builder),
        .windows => try collectWindows(builder),
        else => return error.Unavailable,
    }
    if (list.items.len == 0) return error.Unavailable;
}

// ---------------------------------------------------------------------------------------------
// Linux: /proc/self/maps, "start-end perms offset dev inode [path]" per line, in address order.

/// A streaming parser for the first two fields of each line; the rest of a line is skipped, so a
/// path of any length costs nothing.
const MapsParser = struct {
    state: enum { start, end, perms, skip } = .start,
    value: u64 = 0,
    digits: u32 = 0,
    start: u64 = 0,
    end: u64 = 0,
    perms: u64 = 0,
    perm_index: u32 = 0,

    fn feed(self: *MapsParser, byte: u8, out: Builder) Error!void {
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

    fn feedPerm(self: *MapsParser, byte: u8, out: Builder) Error!void {
        const expected = "rwx"[0..];
        if (self.perm_index < 3) {
            if (byte == expected[self.perm_index]) {
                if (self.perm_index == 0) self.perms |= perm_read;
                if (self.perm_index == 2) self.perms |= perm_exec;
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

fn collectLinux(out: Builder) Error!void {
    const fd = std.posix.openZ("/proc/self/maps", .{ .ACCMODE = .RDONLY, .CLOEXEC = true }, 0) catch
        return error.Unavailable;
    defer std.posix.close(fd);
    var buffer: [16 * 1024]u8 = undefined;
    var parser = MapsParser{};
    // The listing of the largest process Linux allows is far below this (about 65530 lines).
    var total: usize = 0;
    while (total < 1 << 30) {
        const n = std.posix.read(fd, &buffer) catch return error.Inconsistent;
        if (n == 0) break;
        total += n;
        for (buffer[0..n]) |byte| try parser.feed(byte, out);
    }
    try parser.finish();
}

// ---------------------------------------------------------------------------------------------
// macOS: mach_vm_region_recurse, descending into submaps (the shared cache).

/// `vm_region_submap_short_info_data_64_t`: declared under #pragma pack(4), so `offset` is at 12.
const SubmapShortInfo64 = extern struct {
    protection: i32,
    max_protection: i32,
    inheritance: u32,
    offset: u64 align(4),
    user_tag: u32,
    ref_count: u32,
    shadow_depth: u16,
    external_pager: u8,
    share_mode: u8,
    is_submap: i32,
    behavior: i32,
    object_id: u32,
    user_wired_count: u16,
    padding: u16,
};

comptime {
    assert(@offsetOf(SubmapShortInfo64, "offset") == 12);
    assert(@offsetOf(SubmapShortInfo64, "is_submap") == 32);
    assert(@sizeOf(SubmapShortInfo64) == 48);
}

const VM_PROT_READ: i32 = 1;
const VM_PROT_EXECUTE: i32 = 4;

fn collectDarwin(out: Builder) Error!void {
    if (builtin.os.tag != .macos) return error.Unavailable;
    const task = std.c.mach_task_self();
    var address: usize = 0;
    var depth: u32 = 0;
    var steps: usize = 0;
    while (steps < steps_max) : (steps += 1) {
        var size: u64 = 0;
        var info: SubmapShortInfo64 = undefined;
        var count: u32 = @sizeOf(SubmapShortInfo64) / @sizeOf(i32);
        // KERN_INVALID_ADDRESS past the last region ends the walk.
        const info_out: std.c.vm_region_recurse_info_t = @ptrCast(&info);
        const kern = std.c.mach_vm_region_recurse(task, &address, &size, &depth, info_out, &count);
        if (kern != 0) return;
        if (info.is_submap != 0) {
            depth += 1;
            continue;
        }
        const end = std.math.add(u64, address, size) catch return;
        var perms: u64 = 0;
        if (info.protection & VM_PROT_READ != 0) perms |= perm_read;
        if (info.protection & VM_PROT_EXECUTE != 0) perms |= perm_exec;
        try out.add(address, end, perms);
        address = @intCast(end);
    }
}

// ---------------------------------------------------------------------------------------------
// Windows: VirtualQuery from the bottom of the address space up.

fn collectWindows(out: Builder) Error!void {
    if (builtin.os.tag != .windows) return error.Unavailable;
    const w = std.os.windows;
    const readable_protections: u32 = 0x02 | 0x04 | 0x08 | 0x20 | 0x40 | 0x80;
    const executable_protections: u32 = 0x10 | 0x20 | 0x40 | 0x80;
    var address: usize = 0;
    var steps: usize = 0;
    while (steps < steps_max) : (steps += 1) {
        var info: w.MEMORY_BASIC_INFORMATION = undefined;
        const info_bytes = @sizeOf(w.MEMORY_BASIC_INFORMATION);
        if (w.kernel32.VirtualQuery(@ptrFromInt(address), &info, info_bytes) == 0) return;
        const base = @intFromPtr(info.BaseAddress);
        const end = std.math.add(usize, base, info.RegionSize) catch return;
        if (end <= address) return;
        const protect: u32 = info.Protect;
        if (info.State == w.MEM_COMMIT and protect & (w.PAGE_NOACCESS | w.PAGE_GUARD) == 0) {
            var perms: u64 = 0;
            if (protect & readable_protections != 0) perms |= perm_read;
            if (protect & executable_protections != 0) perms |= perm_exec;
            try out.add(base, end, perms);
        }
        address = end;
    }
}

// ---------------------------------------------------------------------------------------------
// Tests

const testing = std.testing;

/// Test support (Linux): `pages` fresh read-write pages at an address nothing in this process
/// used before, so no table can list them from an earlier mapping (the one thing the table cannot
/// notice is memory unmapped after it was read). Unmap with `std.posix.munmap`.
pub fn freshRegion(pages: usize) ![]align(std.heap.page_size_min) u8 {
    const page = std.heap.page_size_min;
    const Hint = struct {
        var next = std.atomic.Value(usize).init(0x3e00_0000_0000);
    };
    const bytes = pages * page;
    // A guard gap between regions, so two of them never merge into one mapping.
    const at = Hint.next.fetchAdd(bytes + 16 * page, .monotonic);
    const region = try std.posix.mmap(
        @ptrFromInt(at),
        bytes,
        std.posix.PROT.READ | std.posix.PROT.WRITE,
        .{ .TYPE = .PRIVATE, .ANONYMOUS = true },
        -1,
        0,
    );
    if (@intFromPtr(region.ptr) != at) {
        std.posix.munmap(region);
        return error.SkipZigTest;
    }
    return region;
}

fn parseForTest(text: []const u8, list: *std.ArrayList(Entry)) Error!void {
    var parser = MapsParser{};
    for (text) |byte| try parser.feed(byte, .{ .list = list });
    try parser.finish();
}

test "the maps parser merges equal neighbours and drops inaccessible ranges" {
    var list: std.ArrayList(Entry) = .empty;
    defer list.deinit(std.heap.raw_c_allocator);
    try parseForTest(
        "1000-2000 r--p 00000000 08:01 12 /usr/lib/a.so\n" ++
            "2000-3000 r--p 00001000 08:01 12 /usr/lib/a.so\n" ++
            "3000-5000 r-xp 00002000 08:01 12 /usr/lib/a.so\n" ++
            "5000-6000 ---p 00000000 00:00 0 \n" ++
            "7fff0000-7fff1000 rw-s 00000000 00:00 0                          [stack]\n" ++
            "ffffffffff600000-ffffffffff601000 --xp 00000000 00:00 0          [vsyscall]",
        &list,
    );
    try testing.expectEqual(@as(usize, 4), list.items.len);
    try testing.expectEqual(@as(u64, 0x1000 | perm_read), list.items[0].lo);
    try testing.expectEqual(@as(u64, 0x3000), list.items[0].hi);
    try testing.expectEqual(@as(u64, 0x3000 | perm_read | perm_exec), list.items[1].lo);
    try testing.expectEqual(@as(u64, 0x7fff0000 | perm_read), list.items[2].lo);
    try testing.expectEqual(@as(u64, 0xffffffffff600000 | perm_exec), list.items[3].lo);
}

test "the maps parser refuses what it does not understand" {
    var list: std.ArrayList(Entry) = .empty;
    defer list.deinit(std.heap.raw_c_allocator);
    const bad = [_][]const u8{
        "1000 r--p\n",
        "1000-2000 rq-p 0 0:0 0\n",
        "10000000000000000-10000000000000001 r--p 0 0:0 0\n",
        "2000-1000 r--p 0 0:0 0\n",
        "1001-2000 r--p 0 0:0 0\n",
        "-2000 r--p 0 0:0 0\n",
    };
    for (bad) |text| {
        list.clearRetainingCapacity();
        try testing.expectError(error.Unavailable, parseForTest(text, &list));
    }
    list.clearRetainingCapacity();
    try testing.expectError(
        error.Inconsistent,
        parseForTest("3000-4000 r--p 0 0:0 0\n1000-2000 r--p 0 0:0 0\n", &list),
    );
    list.clearRetainingCapacity();
    try testing.expectError(error.Inconsistent, parseForTest("1000-2000 r-", &list));
}

test "this process: heap, stack and code are found; unmapped and PROT_NONE pages are not" {
    if (builtin.os.tag != .linux) return error.SkipZigTest;
    const heap = (try std.heap.raw_c_allocator.alloc(u8, 64)).ptr;
    defer std.heap.raw_c_allocator.free(heap[0..64]);
    var local: u64 = 7;
    try testing.expect(readable(@intFromPtr(heap), 64));
    try testing.expect(readable(@intFromPtr(&local), 8));
    try testing.expect(executable(@intFromPtr(&readable)));
    try testing.expect(!readable(0, 8));
    try testing.expect(!readable(std.math.maxInt(usize) - 7, 16));
    try testing.expect(!readable((1 << 47) - 4096, 8));

    const page = std.heap.page_size_min;
    const region = try freshRegion(4);
    defer std.posix.munmap(region);
    const base = @intFromPtr(region.ptr);
    try std.posix.mprotect(@alignCast(region[page .. 2 * page]), std.posix.PROT.NONE);
    std.posix.munmap(@alignCast(region[3 * page ..]));
    // Found after a re-read of the listing (the region is newer than the table). (Not the heap
    // for "not code": valgrind maps its malloc arena read-write-execute.)
    try testing.expect(readable(base, page));
    try testing.expect(!readable(base + page, 8));
    try testing.expect(!readable(base + page - 8, 16));
    try testing.expect(readable(base + 2 * page, 8));
    try testing.expect(!readable(base + 2 * page, page + 8));
    try testing.expect(!readable(base + 3 * page, 8));
    try testing.expect(!executable(base));
}

test "hits do not read the listing again" {
    if (builtin.os.tag != .linux) return error.SkipZigTest;
    const heap = (try std.heap.raw_c_allocator.alloc(u8, 64)).ptr;
    defer std.heap.raw_c_allocator.free(heap[0..64]);
    try testing.expect(readable(@intFromPtr(heap), 64));
    const before = refreshes();
    for (0..10_000) |_| {
        try testing.expect(readable(@intFromPtr(heap), 64));
        try testing.expect(executable(@intFromPtr(&readable)));
    }
    try testing.expectEqual(before, refreshes());
}

test "the entry a hit remembers is not used once the table has been read again" {
    if (builtin.os.tag != .linux) return error.SkipZigTest;
    const page = std.heap.page_size_min;
    const region = try freshRegion(2);
    defer std.posix.munmap(region[0..page]);
    const base = @intFromPtr(region.ptr);
    var span: Span = .{};
    try testing.expect(readableSpan(base, 8, &span));
    // Remembered by the lookup that found it: the second page is a hit, with its span.
    const before = refreshes();
    try testing.expect(readableSpan(base + page, 8, &span));
    try testing.expectEqual(before, refreshes());
    try testing.expect(span.contains(base, 2 * page));
    // Unmapped: still in the table (and remembered) until a miss reads the listing again...
    std.posix.munmap(@alignCast(region[page..]));
    try testing.expect(!readable((1 << 46) + 4096 * 4099, 8));
    try testing.expect(refreshes() > before);
    // ...after which the remembered copy from the old table no longer answers.
    try testing.expect(!readableSpan(base + page, 8, &span));
    try testing.expectEqual(Span{}, span);
    try testing.expect(readable(base, 8));
}

test "lookups from many threads while others force refreshes" {
    if (builtin.os.tag != .linux) return error.SkipZigTest;
    const Worker = struct {
        fn look(heap: usize, failures: *std.atomic.Value(u32)) void {
            for (0..20_000) |_| {
                const code = @intFromPtr(&readable);
                if (!readable(heap, 64) or !executable(code)) _ = failures.fetchAdd(1, .monotonic);
            }
        }
        fn miss(done: *std.atomic.Value(bool)) void {
            var k: usize = 0;
            while (!done.load(.acquire) and k < 200) : (k += 1) _ = readable(
                (1 << 46) + k * 4096,
                8,
            );
        }
    };
    const heap = (try std.heap.raw_c_allocator.alloc(u8, 64)).ptr;
    defer std.heap.raw_c_allocator.free(heap[0..64]);
    var failures = std.atomic.Value(u32).init(0);
    var done = std.atomic.Value(bool).init(false);
    var threads: [4]std.Thread = undefined;
    for (threads[0..3]) |*t| t.* = try std.Thread.spawn(
        .{},
        Worker.look,
        .{ @intFromPtr(heap), &failures },
    );
    threads[3] = try std.Thread.spawn(.{}, Worker.miss, .{&done});
    for (threads[0..3]) |t| t.join();
    done.store(true, .release);
    threads[3].join();
    try testing.expectEqual(@as(u32, 0), failures.load(.monotonic));
}

test "a fork while another thread refreshes leaves the child a working table" {
    // Under valgrind each child's exit is a leak check (of the thread it does not have) that fails.
    if (builtin.os.tag != .linux or std.valgrind.runningOnValgrind() > 0) return error.SkipZigTest;
    const Refresher = struct {
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
    var stop = std.atomic.Value(bool).init(false);
    const thread = try std.Thread.spawn(.{}, Refresher.run, .{&stop});
    defer {
        stop.store(true, .release);
        thread.join();
    }
    for (0..20) |_| {
        const pid = try std.posix.fork();
        if (pid == 0) {
            // A miss needs the refresh lock, which the other thread may have held at the fork.
            const ok = !readable(0x3f80_0000_0000, 8) and readable(@intFromPtr(heap), 64);
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
}
