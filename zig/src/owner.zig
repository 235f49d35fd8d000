//! Atomic-refcounted owner records. Every byte of memory a view or an export points into is kept
//! alive by exactly one owner; the owner gives the memory back (producer deleter, free, or a JS
//! unpin) exactly once, when its last reference goes, on whatever thread that happens.

const std = @import("std");
const builtin = @import("builtin");
const assert = std.debug.assert;
const dlpack = @import("dlpack.zig");
const stats = @import("stats.zig");
const memory = @import("memory.zig");
const cuda = @import("cuda.zig");
const mapped = @import("mapped.zig");

pub const Kind = enum(u8) {
    /// payload: a `DLManagedTensorVersioned*` from a producer.
    versioned,
    /// payload: a legacy `DLManagedTensor*` from a producer.
    legacy,
    /// payload: memory from `memory.alloc` (posix_memalign, or _aligned_malloc on Windows).
    native,
    /// payload: an id the JS side maps to a buffer (or any object) it keeps reachable. Released
    /// pins are queued for JS to sweep, because a deleter may run on any thread and must never
    /// call JS.
    pin,
    /// payload: CUDA device memory from `cuMemAlloc_v2` on device `Owner.device` (cuda.zig).
    cuda_device,
    /// payload: page-locked host memory from `cuMemHostAlloc` (cuda.zig).
    cuda_host,
    /// payload: managed memory from `cuMemAllocManaged` (cuda.zig).
    cuda_managed,
    /// payload: a file mapped by `mapped.map`, `bytes` long; the last release unmaps it.
    mapping,
};

pub const Owner = struct {
    refs: std.atomic.Value(u32),
    kind: Kind,
    payload: usize,
    bytes: usize,
    /// The CUDA device whose primary context frees a `cuda_*` payload.
    device: i32 = 0,
    /// Link in the released-pins stack; only used once `refs` reached zero.
    next: ?*Owner = null,
    /// Pins only: the JS realm whose queue the released id goes to.
    realm: *Realm = &default_realm,
    /// Pins of shared memory only: the token another realm names this pin by (0: not shared).
    shared_token: u64 = 0,
    /// Pins of shared memory only: another realm's pin of the same SharedArrayBuffer, released
    /// together with this one, so the memory outlives the realm that exported it.
    keeper: ?*Owner = null,
};

/// A JS realm (the main thread, or one Worker) that pins objects. Pin ids are only meaningful
/// inside the realm that made them, so each realm drains its own queue: a Worker must never
/// receive (and unpin) the main thread's id 5 instead of its own.
pub const Realm = struct {
    /// Released pins, pushed lock-free by deleters on any thread.
    released: std.atomic.Value(?*Owner) = std.atomic.Value(?*Owner).init(null),
    /// Taken off `released` but not handed out yet (the drainer's buffer was full). Only drainers
    /// touch it, under `lock`; deleters never wait for the lock.
    pending: ?*Owner = null,
    lock: std.Thread.Mutex = .{},
    /// Set once the thread that runs this realm's JS has exited (a terminated Worker): nothing
    /// will drain the queue again, so pins released from then on free their record at once.
    ended: std.atomic.Value(bool) = std.atomic.Value(bool).init(false),
    /// The next realm made on the same thread (a thread may host one realm after another).
    next_on_thread: ?*Realm = null,
};

/// The realm of pins made through the realm-less functions.
var default_realm: Realm = .{};

/// Creates an owner holding one reference. When out of memory, the caller decides what happens
/// to the payload.
pub fn create(kind: Kind, payload: usize, bytes: usize) error{OutOfMemory}!*Owner {
    return createIn(&default_realm, kind, payload, bytes);
}

/// `create` for a pin whose release is queued for `realm`.
pub fn createIn(realm: *Realm, kind: Kind, payload: usize, bytes: usize) error{OutOfMemory}!*Owner {
    // Only pins belong to a realm.
    assert(kind == .pin or realm == &default_realm);
    assert(bytes <= std.math.maxInt(i64));
    const owner = try newRecord();
    owner.* = .{
        .refs = std.atomic.Value(u32).init(1),
        .kind = kind,
        .payload = payload,
        .bytes = bytes,
        .realm = realm,
    };
    switch (kind) {
        .versioned, .legacy => stats.add(.imports, 1),
        .native, .cuda_device, .cuda_host, .cuda_managed => {
            stats.add(.allocations, 1);
            stats.add(.allocation_bytes, @intCast(bytes));
        },
        .pin => {
            stats.add(.pins, 1);
            stats.add(.pinned_bytes, @intCast(bytes));
        },
        .mapping => {
            stats.add(.mappings, 1);
            stats.add(.mapped_bytes, @intCast(bytes));
        },
    }
    return owner;
}

/// `create` for an imported tensor (the hot path: no realm, no byte count, one counter).
pub fn createImport(versioned: bool, managed: usize) error{OutOfMemory}!*Owner {
    const owner = try newRecord();
    owner.* = .{
        .refs = std.atomic.Value(u32).init(1),
        .kind = if (versioned) .versioned else .legacy,
        .payload = managed,
        .bytes = 0,
    };
    stats.add(.imports, 1);
    return owner;
}

// Spare records per thread, a bounded stack linked through `next`: an import disposed right away
// (the common case) then neither allocates nor frees one, and neither do the exports after a
// drain of released pins (which frees a batch of records on the JS thread at once). A thread's
// spares are freed when the thread ends (a pthread key's destructor); releases after that on the
// same thread (other keys' destructors) free at once.
const spare_records = builtin.os.tag != .windows and builtin.link_libc;
/// At most this many spares per thread (a drain's batch of pins; about 5 KiB).
pub const spare_max: u8 = 64;
const Spare = enum(u8) { unset, on, closed };
threadlocal var spare: ?*Owner = null;
threadlocal var spare_count: u8 = 0;
threadlocal var spare_state: Spare = .unset;
var spare_key: if (spare_records) std.c.pthread_key_t else void = undefined;
var spare_key_once = std.once(makeSpareKey);
var spare_key_ready: bool = false;

fn makeSpareKey() void {
    if (!spare_records) return;
    spare_key_ready = std.c.pthread_key_create(&spare_key, spareThreadEnded) == .SUCCESS;
}

/// Spare records freed by ending threads (a cold path, counted for the tests).
var spares_freed_at_end = std.atomic.Value(usize).init(0);

fn spareThreadEnded(_: *anyopaque) callconv(.c) void {
    spare_state = .closed;
    _ = spares_freed_at_end.fetchAdd(spare_count, .monotonic);
    freeSpares();
}

/// Frees every spare record of this thread.
fn freeSpares() void {
    while (spare) |record| {
        spare = record.next;
        spare_count -= 1;
        memory.destroy(record);
    }
    assert(spare_count == 0);
}

/// How many spare records this thread holds.
pub fn spareCount() u8 {
    return spare_count;
}

/// A record for `createIn`: the thread's newest spare, else a new one. The caller writes every
/// field (`next` included).
fn newRecord() error{OutOfMemory}!*Owner {
    if (spare) |record| {
        assert(spare_count > 0);
        spare = record.next;
        spare_count -= 1;
        return record;
    }
    return memory.create(Owner);
}

/// Gives a record back: kept as one of the thread's spares while there is room, else freed.
fn freeRecord(record: *Owner) void {
    if (spare_count < spare_max and (spare_state == .on or (spare_state == .unset and spareOn()))) {
        record.next = spare;
        spare = record;
        spare_count += 1;
        return;
    }
    memory.destroy(record);
}

/// Arms the thread-end hook that frees this thread's spare (once per thread).
fn spareOn() bool {
    assert(spare_state == .unset);
    if (!spare_records) return false;
    spare_key_once.call();
    // The key's value only needs to be non-null for its destructor to run.
    if (!spare_key_ready or std.c.pthread_setspecific(spare_key, &spare_key) != 0) {
        spare_state = .closed;
        return false;
    }
    spare_state = .on;
    return true;
}

/// Library memory (`memory.alloc`) inside a new owner that frees it.
pub fn createNative(bytes: usize, alignment: usize, zero: bool) error{OutOfMemory}!*Owner {
    const payload = try memory.alloc(bytes, alignment, zero);
    errdefer memory.free(payload);
    return create(.native, @intFromPtr(payload), bytes);
}

fn cudaKind(kind: cuda.AllocKind) Kind {
    return switch (kind) {
        .device => .cuda_device,
        .host => .cuda_host,
        .managed => .cuda_managed,
    };
}

fn allocKind(kind: Kind) cuda.AllocKind {
    return switch (kind) {
        .cuda_device => .device,
        .cuda_host => .host,
        .cuda_managed => .managed,
        .versioned, .legacy, .native, .pin, .mapping => unreachable,
    };
}

/// CUDA memory (`cuda.allocate`) of device `ordinal` inside a new owner that frees it.
pub fn createCuda(kind: cuda.AllocKind, ordinal: i32, bytes: usize, zero: bool) cuda.Error!*Owner {
    const payload = try cuda.allocate(kind, ordinal, bytes, zero);
    const created = create(cudaKind(kind), payload, bytes) catch {
        cuda.free(kind, ordinal, payload, bytes);
        return error.OutOfMemory;
    };
    created.device = ordinal;
    return created;
}

pub fn retain(owner: *Owner) void {
    const previous = owner.refs.fetchAdd(1, .monotonic);
    // Retaining a dead owner is a use-after-free in the caller; the counter cannot recover from it.
    assert(previous > 0);
    assert(previous < std.math.maxInt(u32));
}

/// Drops one reference and says whether it was the last. The caller's reference is the only one
/// when the count reads 1: no other thread holds one to retain or release with, so the count is
/// zeroed without a read-modify-write (the common case, an import disposed by its one view, then
/// costs no locked instruction). The acquire load orders this after every earlier release.
fn dropReference(owner: *Owner) bool {
    if (owner.refs.load(.acquire) == 1) {
        owner.refs.store(0, .monotonic);
        return true;
    }
    const previous = owner.refs.fetchSub(1, .acq_rel);
    assert(previous > 0);
    return previous == 1;
}

/// Drops one reference; the last one gives the payload back.
pub fn release(owner: *Owner) void {
    if (!dropReference(owner)) return;
    switch (owner.kind) {
        .versioned, .legacy => {
            dlpack.deleteManaged(owner.payload, owner.kind == .versioned);
            stats.add(.imports, -1);
            stats.add(.deleters_called, 1);
            freeRecord(owner);
        },
        .native, .cuda_device, .cuda_host, .cuda_managed, .pin, .mapping => releaseHeld(owner),
    }
}

/// The last reference of an owner of memory this library holds (not an import). Out of line: the
/// CUDA and shared-pin paths' stack frame would otherwise be every import release's.
noinline fn releaseHeld(owner: *Owner) void {
    assert(owner.refs.load(.monotonic) == 0);
    const bytes: i64 = @intCast(owner.bytes);
    switch (owner.kind) {
        .versioned, .legacy => unreachable,
        .native => {
            memory.free(@ptrFromInt(owner.payload));
            stats.add(.allocations, -1);
            stats.add(.allocation_bytes, -bytes);
            freeRecord(owner);
        },
        .cuda_device, .cuda_host, .cuda_managed => {
            cuda.free(allocKind(owner.kind), owner.device, owner.payload, owner.bytes);
            stats.add(.allocations, -1);
            stats.add(.allocation_bytes, -bytes);
            freeRecord(owner);
        },
        .mapping => {
            mapped.unmap(owner.payload, owner.bytes);
            stats.add(.mappings, -1);
            stats.add(.mapped_bytes, -bytes);
            freeRecord(owner);
        },
        // The record lives on until JS has read its id off the stack.
        .pin => {
            if (owner.shared_token != 0) {
                if (unshare(owner)) |keeper| release(keeper);
            }
            pushReleasedPin(owner);
        },
    }
}

/// `release` from the JS thread of a pin's own realm when JS drops the pinned object itself (a
/// capsule disposed from JS): the last reference frees the record at once instead of queueing its
/// id. Returns the pin's id then, else 0 (references remain, it is not a pin, or it is shared with
/// another realm: those go the usual way).
pub fn releaseHere(owner: *Owner) u64 {
    if (owner.kind != .pin or owner.shared_token != 0) {
        release(owner);
        return 0;
    }
    if (!dropReference(owner)) return 0;
    assert(owner.next == null);
    const id = owner.payload;
    assert(id != 0);
    stats.add(.pins, -1);
    stats.add(.pinned_bytes, -@as(i64, @intCast(owner.bytes)));
    freeRecord(owner);
    return id;
}

/// The released-pins stack of a realm: a Treiber stack whose pushes come from deleters on any
/// thread, without a lock. Drainers take the whole stack in one swap, so there is no ABA hazard.
fn pushReleasedPin(owner: *Owner) void {
    assert(owner.kind == .pin);
    assert(owner.refs.load(.monotonic) == 0);
    // A record is pushed once: it is freed when popped.
    assert(owner.next == null);
    assert(owner.shared_token == 0 or owner.keeper == null);
    const realm = owner.realm;
    var head = realm.released.load(.monotonic);
    while (true) {
        assert(head != owner);
        owner.next = head;
        // Sequentially consistent with `endRealm`: either its final discard sees this push, or
        // this thread sees `ended` below and discards the record itself.
        head = realm.released.cmpxchgWeak(head, owner, .seq_cst, .monotonic) orelse break;
    }
    if (realm.ended.load(.seq_cst)) discardRealm(realm);
}

/// Writes up to `out.len` released pin ids of the default realm and frees their records.
pub fn drainReleasedPins(out: []f64) usize {
    return drainRealm(&default_realm, out);
}

/// Writes up to `out.len` released pin ids of `realm` and frees their records. Returns how many
/// were written; the rest stay queued for the next call, in amortised O(1) per id however many
/// were released at once.
pub fn drainRealm(realm: *Realm, out: []f64) usize {
    realm.lock.lock();
    defer realm.lock.unlock();
    var written: usize = 0;
    while (written < out.len) {
        const owner = realm.pending orelse realm.released.swap(null, .acquire) orelse break;
        // Only released pins of this realm are ever pushed here.
        assert(owner.kind == .pin);
        assert(owner.realm == realm);
        assert(owner.refs.load(.monotonic) == 0);
        realm.pending = owner.next;
        out[written] = @floatFromInt(owner.payload);
        written += 1;
        stats.add(.pins, -1);
        stats.add(.pinned_bytes, -@as(i64, @intCast(owner.bytes)));
        freeRecord(owner);
    }
    assert(written <= out.len);
    return written;
}

// Shared pins: a Worker that exports a SharedArrayBuffer names the pin by a token another realm
// (the main thread) can attach a keeper pin to, holding the same backing store in its own heap.
// Tokens are never reused, so a keeper cannot attach to a later pin at a recycled address.
var shared_lock: std.Thread.Mutex = .{};
var shared_pins: std.AutoHashMapUnmanaged(u64, *Owner) = .{};
var next_token: u64 = 1;

/// Makes `pin` attachable by another realm; returns its token.
pub fn share(pin: *Owner) error{OutOfMemory}!u64 {
    assert(pin.kind == .pin);
    assert(pin.shared_token == 0);
    assert(pin.refs.load(.monotonic) > 0);
    shared_lock.lock();
    defer shared_lock.unlock();
    const token = next_token;
    assert(token > 0);
    assert(!shared_pins.contains(token));
    try shared_pins.put(std.heap.raw_c_allocator, token, pin);
    next_token += 1;
    pin.shared_token = token;
    return token;
}

/// Attaches `keeper` (a pin of another realm) to the shared pin named `token`: it is released when
/// that pin is. False when the pin is gone already or has a keeper (the caller releases `keeper`).
pub fn keep(token: u64, keeper: *Owner) bool {
    assert(keeper.kind == .pin);
    assert(keeper.refs.load(.monotonic) > 0);
    shared_lock.lock();
    defer shared_lock.unlock();
    const pin = shared_pins.get(token) orelse return false;
    if (pin.keeper != null) return false;
    pin.keeper = keeper;
    return true;
}

pub const Kept = enum { kept, waiting, gone };

/// Whether the shared pin `token` has a keeper, still waits for one, or is gone.
pub fn keptState(token: u64) Kept {
    shared_lock.lock();
    defer shared_lock.unlock();
    const pin = shared_pins.get(token) orelse return .gone;
    assert(pin.kind == .pin and pin.shared_token == token);
    return if (pin.keeper != null) .kept else .waiting;
}

/// Forgets a shared pin whose last reference went; returns its keeper to release.
fn unshare(pin: *Owner) ?*Owner {
    shared_lock.lock();
    defer shared_lock.unlock();
    assert(pin.refs.load(.monotonic) == 0);
    const removed = shared_pins.remove(pin.shared_token);
    assert(removed);
    // Shared pins are rare (SharedArrayBuffers exported on Workers): no table while there is none.
    if (shared_pins.count() == 0) shared_pins.clearAndFree(std.heap.raw_c_allocator);
    const keeper = pin.keeper;
    pin.keeper = null;
    return keeper;
}

/// How many realms have not ended (the main thread's included, once it made one).
pub fn liveRealms() u32 {
    return live_realms.load(.monotonic);
}
var live_realms: std.atomic.Value(u32) = std.atomic.Value(u32).init(0);

/// Frees every queued pin record of `realm` without handing the ids to anyone (its JS is gone).
fn discardRealm(realm: *Realm) void {
    var ids: [64]f64 = undefined;
    while (drainRealm(realm, &ids) == ids.len) {}
}

/// Marks `realm` ended and frees what its queue holds. Pins still held by consumers stay counted
/// until those consumers release them; then `pushReleasedPin` frees them.
pub fn endRealm(realm: *Realm) void {
    assert(realm != &default_realm);
    if (realm.ended.swap(true, .seq_cst)) return;
    const live = live_realms.fetchSub(1, .monotonic);
    assert(live > 0);
    discardRealm(realm);
}

/// Realms are made from the thread that runs their JS (`dlpk_realm_new` is called by the realm
/// itself), so a thread-exit destructor learns when a Worker's thread is gone and ends every
/// realm that thread made. Not on Windows (no pthreads there): its ended Workers' pins stay queued.
const thread_exit_hook = builtin.os.tag != .windows and builtin.link_libc;
var realm_key: if (thread_exit_hook) std.c.pthread_key_t else void = undefined;
var realm_key_once = std.once(makeRealmKey);
var realm_key_ready: bool = false;

fn makeRealmKey() void {
    if (!thread_exit_hook) return;
    realm_key_ready = std.c.pthread_key_create(&realm_key, threadExited) == .SUCCESS;
}

fn threadExited(value: *anyopaque) callconv(.c) void {
    var realm: ?*Realm = @ptrCast(@alignCast(value));
    while (realm) |r| {
        realm = r.next_on_thread;
        endRealm(r);
    }
}

/// A new realm, owned by the calling thread. Realm records are never freed: a native consumer may
/// release a pin long after the realm's JS side (a terminated Worker) is gone, and the record is a
/// few words.
pub fn createRealm() error{OutOfMemory}!*Realm {
    const realm = try std.heap.raw_c_allocator.create(Realm);
    realm.* = .{};
    _ = live_realms.fetchAdd(1, .monotonic);
    if (thread_exit_hook) {
        realm_key_once.call();
        if (realm_key_ready) {
            realm.next_on_thread = @ptrCast(@alignCast(std.c.pthread_getspecific(realm_key)));
            // On failure the realm simply never ends, as before this hook existed.
            if (std.c.pthread_setspecific(realm_key, realm) != 0) realm.next_on_thread = null;
        }
    }
    return realm;
}

// ---------------------------------------------------------------------------------------------
// Tests

var test_deleted: std.atomic.Value(u32) = std.atomic.Value(u32).init(0);

fn testDeleter(self: *dlpack.ManagedTensorVersioned) callconv(.c) void {
    _ = test_deleted.fetchAdd(1, .monotonic);
    std.heap.raw_c_allocator.destroy(self);
}

test "last release calls the deleter exactly once" {
    test_deleted.store(0, .monotonic);
    const m = try std.heap.raw_c_allocator.create(dlpack.ManagedTensorVersioned);
    m.* = std.mem.zeroes(dlpack.ManagedTensorVersioned);
    m.deleter = testDeleter;
    const owner = try create(.versioned, @intFromPtr(m), 0);
    retain(owner);
    retain(owner);
    release(owner);
    release(owner);
    try std.testing.expectEqual(@as(u32, 0), test_deleted.load(.monotonic));
    release(owner);
    try std.testing.expectEqual(@as(u32, 1), test_deleted.load(.monotonic));
}

fn spareRoundTrip(reused: *bool) void {
    const first = createNative(8, 16, false) catch return;
    release(first);
    const second = createNative(8, 16, false) catch return;
    reused.* = first == second;
    release(second);
}

test "a released record is the thread's spare: reused by its next owner, fresh in every field" {
    var reused = false;
    spareRoundTrip(&reused);
    try std.testing.expect(!spare_records or reused);
    // The spare comes back with every field written anew.
    const pin = try createIn(&default_realm, .pin, 9, 4);
    try std.testing.expectEqual(@as(u32, 1), pin.refs.load(.monotonic));
    try std.testing.expect(pin.next == null and pin.keeper == null and pin.shared_token == 0);
    try std.testing.expectEqual(@as(u64, 9), releaseHere(pin));
    // Other threads keep spares of their own, freed when they end.
    var threads: [4]std.Thread = undefined;
    var reuses = [_]bool{false} ** 4;
    for (&threads, &reuses) |*t, *r| t.* = try std.Thread.spawn(.{}, spareRoundTrip, .{r});
    for (threads) |t| t.join();
    for (reuses) |r| try std.testing.expect(!spare_records or r);
}

fn sparesBounded(ok: *bool) void {
    var records: [spare_max + 8]*Owner = undefined;
    var made: usize = 0;
    defer for (records[0..made]) |record| release(record);
    for (&records) |*slot| {
        slot.* = createNative(8, 16, false) catch return;
        made += 1;
    }
    const before = spareCount();
    for (records[0..made]) |record| release(record);
    made = 0;
    // At most spare_max kept, the rest freed; the next owners take the kept ones, newest first.
    ok.* = !spare_records or (spareCount() == spare_max and before <= spare_max);
    const again = createNative(8, 16, false) catch return;
    const newest = again == records[spare_max - 1];
    ok.* = ok.* and (!spare_records or (newest and spareCount() == spare_max - 1));
    release(again);
}

test "a thread's spares are bounded, reused newest first, and freed when the thread ends" {
    var ok = false;
    sparesBounded(&ok);
    try std.testing.expect(ok);
    // Threads of their own, each ending with a full stack, which its end frees.
    var threads: [3]std.Thread = undefined;
    var oks = [_]bool{false} ** 3;
    const freed = spares_freed_at_end.load(.monotonic);
    for (&threads, &oks) |*t, *r| t.* = try std.Thread.spawn(.{}, sparesBounded, .{r});
    for (threads) |t| t.join();
    for (oks) |r| try std.testing.expect(r);
    const expected: usize = if (spare_records) 3 * @as(usize, spare_max) else 0;
    try std.testing.expectEqual(freed + expected, spares_freed_at_end.load(.monotonic));
}

test "released pins are drained in batches, per domain, and nothing is lost" {
    var domain: Realm = .{};
    var other: Realm = .{};
    var ids: [5]*Owner = undefined;
    for (&ids, 0..) |*slot, i| slot.* = try createIn(&domain, .pin, 100 + i, 8);
    release(try createIn(&other, .pin, 7, 0));
    for (ids) |owner| release(owner);
    var out: [2]f64 = undefined;
    var seen: usize = 0;
    var sum: f64 = 0;
    while (true) {
        const n = drainRealm(&domain, &out);
        if (n == 0) break;
        for (out[0..n]) |id| sum += id;
        seen += n;
    }
    try std.testing.expectEqual(@as(usize, 5), seen);
    try std.testing.expectEqual(@as(f64, 100 + 101 + 102 + 103 + 104), sum);
    try std.testing.expectEqual(@as(usize, 1), drainRealm(&other, &out));
    try std.testing.expectEqual(@as(f64, 7), out[0]);
}

test "pins released from many threads are all drained" {
    const per_thread = 2000;
    const thread_count = 8;
    var domain: Realm = .{};
    const Worker = struct {
        fn run(d: *Realm, base: usize) void {
            var i: usize = 0;
            while (i < per_thread) : (i += 1) release(
                createIn(d, .pin, base + i, 0) catch unreachable,
            );
        }
    };
    var threads: [thread_count]std.Thread = undefined;
    for (&threads, 0..) |*t, i| t.* = try std.Thread.spawn(
        .{},
        Worker.run,
        .{ &domain, i * per_thread },
    );
    for (threads) |t| t.join();
    var out: [256]f64 = undefined;
    var seen: usize = 0;
    while (true) {
        const n = drainRealm(&domain, &out);
        if (n == 0) break;
        seen += n;
    }
    try std.testing.expectEqual(@as(usize, per_thread * thread_count), seen);
}

test "a large backlog of released pins drains in linear time" {
    const count = 200_000;
    for (0..count) |i| release(try create(.pin, i + 1, 0));
    var out: [256]f64 = undefined;
    var seen: usize = 0;
    var timer = try std.time.Timer.start();
    while (true) {
        const n = drainReleasedPins(&out);
        if (n == 0) break;
        seen += n;
    }
    try std.testing.expectEqual(@as(usize, count), seen);
    // Re-queueing the remainder on every call (the old drain) took minutes here; linear takes ms.
    try std.testing.expect(timer.read() < 5 * std.time.ns_per_s);
}

test "each realm drains only its own pins" {
    // Realm records live for the process (this thread's exit hook still lists them).
    const a = try createRealm();
    const b = try createRealm();
    // Both realms number their pins from 1, as two JS realms do.
    for (1..4) |id| release(try createIn(a, .pin, id, 0));
    for (1..6) |id| release(try createIn(b, .pin, id, 0));
    var out: [16]f64 = undefined;
    try std.testing.expectEqual(@as(usize, 3), drainRealm(a, &out));
    try std.testing.expectEqual(@as(usize, 0), drainRealm(a, &out));
    try std.testing.expectEqual(@as(usize, 5), drainRealm(b, &out));
    try std.testing.expectEqual(@as(usize, 0), drainReleasedPins(&out));
}

test "a realm ends with its thread: queued and later releases free their records" {
    const Worker = struct {
        fn run(out: **Realm, held: **Owner) void {
            const realm = createRealm() catch unreachable;
            out.* = realm;
            // One pin queued (never drained by its JS), one still held by a consumer.
            release(createIn(realm, .pin, 1, 8) catch unreachable);
            held.* = createIn(realm, .pin, 2, 8) catch unreachable;
        }
    };
    const pins_before = stats.get(.pins);
    // Realm records live for the process; this one stays reachable (valgrind's leak check).
    const Reachable = struct {
        var realm: *Realm = undefined;
    };
    var held: *Owner = undefined;
    const thread = try std.Thread.spawn(.{}, Worker.run, .{ &Reachable.realm, &held });
    thread.join();
    const realm = Reachable.realm;
    if (!thread_exit_hook) return error.SkipZigTest;
    try std.testing.expect(realm.ended.load(.seq_cst));
    // The queued pin was freed when the thread exited; the held one counts until released.
    try std.testing.expectEqual(pins_before + 1, stats.get(.pins));
    release(held);
    try std.testing.expectEqual(pins_before, stats.get(.pins));
    try std.testing.expect(realm.released.load(.seq_cst) == null);
}

test "a keeper pin attached to a shared pin is released with it, once" {
    const a = try createRealm();
    const b = try createRealm();
    const exported = try createIn(a, .pin, 1, 16);
    const token = try share(exported);
    const keeper = try createIn(b, .pin, 7, 16);
    try std.testing.expectEqual(Kept.waiting, keptState(token));
    try std.testing.expect(keep(token, keeper));
    try std.testing.expectEqual(Kept.kept, keptState(token));
    const second = try createIn(b, .pin, 8, 16);
    try std.testing.expect(!keep(token, second)); // one keeper per pin
    release(second);
    release(exported);
    var out: [4]f64 = undefined;
    try std.testing.expectEqual(@as(usize, 1), drainRealm(a, &out));
    try std.testing.expectEqual(@as(usize, 2), drainRealm(b, &out)); // 8, then the keeper 7
    // The token died with its pin: a late keeper is refused.
    try std.testing.expectEqual(Kept.gone, keptState(token));
    const late = try createIn(b, .pin, 9, 16);
    try std.testing.expect(!keep(token, late));
    release(late);
    try std.testing.expectEqual(@as(usize, 1), drainRealm(b, &out));
}
