//! The C boundary of the core: imports, exports, owner records, the journal, pins, stats,
//! allocations and copies, and the scratch JS views. Every function returns a status code or
//! writes into memory the caller owns; nothing here may panic or unwind into the host. This is
//! where arguments are checked and where the error unions of the modules below become the ABI's
//! statuses (abi.zig). Every entry that hands JS an owner record or a struct journals it before it
//! returns (`owed`, journal.zig).

const std = @import("std");
const builtin = @import("builtin");
const assert = std.debug.assert;
const abi = @import("abi.zig");
const admit = @import("admit.zig");
const describe = @import("describe.zig");
const dlpack = @import("dlpack.zig");
const exports = @import("exports.zig");
const journal = @import("journal.zig");
const mappings = @import("mappings.zig");
const memory = @import("memory.zig");
const owner = @import("owner.zig");
const stats = @import("stats.zig");

const Description = abi.Description;
const Status = abi.Status;
const import_option = abi.import_option;
const export_option = abi.export_option;

export fn dlpk_abi_version() u32 {
    return abi.version;
}

/// Makes this library impossible to unload. Foreign code keeps pointers into it for as long as it
/// likes (deleters of exports, capsule destructors, Python builtins), while a runtime may dlclose
/// its handle when the isolate that opened it goes away (Deno does, between test files). Called
/// by the loader right after the ABI check; returns 0, or -1 when the platform offers no way.
export fn dlpk_retain_library() i32 {
    if (builtin.os.tag == .windows) return -1;
    var info: mappings.DlInfo = undefined;
    if (mappings.dladdr(@ptrCast(&dlpk_retain_library), &info) == 0) return -1;
    const path = info.fname orelse return -1;
    // RTLD_NODELETE on an already-loaded object: one more reference, and no unloading ever.
    _ = std.c.dlopen(path, .{ .NOW = true, .NODELETE = true, .NOLOAD = true }) orelse return -1;
    return 0;
}

export fn dlpk_description_size() u32 {
    return @sizeOf(Description);
}

/// The description a caller passed the address of (aligned, not NULL).
pub fn descriptionAt(address: f64) ?*Description {
    const out = abi.addressFromF64(address) orelse return null;
    if (out == 0 or out % @alignOf(Description) != 0) return null;
    return @ptrFromInt(out);
}

pub const invalid = @intFromEnum(Status.invalid_argument);

pub fn code(status: Status) i32 {
    return @intFromEnum(status);
}

/// Hands JS what `entry` stands for (an owner record or a struct this call made or took): pushed
/// onto this thread's journal before the call returns, so that until a JS holder ends the entry an
/// exception leaves it to be replayed (journal.zig). Inlined: in a shared library each function
/// that touches thread-local state looks its block up once, in a call, and every caller already
/// did for its own (the scratch, the spare owner records, the export pool).
pub inline fn owed(entry: f64) void {
    journal.push(journal.local(), entry);
}

/// Whether an address could be a managed tensor (aligned, outside the first page, in user space).
pub fn isStruct(address: usize) bool {
    return abi.plausible(dlpack.ManagedTensorVersioned, address);
}

/// The refusal of an address no f64 carries exactly (negative, fractional, 2^53 and up): it cannot
/// be a struct, and nothing is read or released.
fn refuseInexact(out: *Description) i32 {
    return code(out.refuse(.bad_address, abi.detail_dim.none, 0, 0));
}

fn importAt(managed: usize, options: u32, out: *Description) i32 {
    const keep = options & import_option.keep_on_refusal != 0;
    const refusal: admit.Refusal = if (keep) .keep else .release;
    return code(admit.sequence(managed, .{
        .versioned = options & import_option.versioned != 0,
        .strict_offset = options & import_option.strict_offset != 0,
    }, out, refusal));
}

/// Builds an export from the description at `spec_address`: data address (address_lo/hi), owner,
/// device, dtype, flags, ndim, shape and strides. On success writes the managed struct's address
/// into address_lo/hi. The TS side has checked the layout against the memory it points into.
export fn dlpk_export(options: u32, spec_address: f64) i32 {
    const spec = descriptionAt(spec_address) orelse return invalid;
    return code(exportOwed(spec, options));
}

/// The export of `dlpk_export`: an adopted owner record's entry (JS journaled it) ends, the
/// struct's is pushed.
fn exportOwed(spec: *Description, options: u32) Status {
    const status = exports.fromDescription(spec, options);
    if (status != .ok) return status;
    const owner_address = @as(usize, spec.owner_hi) << 32 | spec.owner_lo;
    if (options & export_option.adopt_owner != 0 and owner_address != 0) {
        journal.end(journal.local(), abi.ownerEntry(owner_address));
    }
    owed(abi.structEntry(@intCast(spec.address()), options & export_option.versioned != 0));
    return .ok;
}

/// Exports JS memory in one call: `buffer` is the TypedArray's data (passed by the runtime's FFI,
/// so JS never computes the address), pinned as `pin_id` (`pin_bytes` bytes) for as long as the
/// export lives. The spec's address fields hold the byte offset of element 0 within the buffer;
/// on success they are overwritten with the managed struct's address.
export fn dlpk_export_buffer(
    buffer: ?[*]u8,
    realm_address: f64,
    pin_id: f64,
    pin_bytes: f64,
    options: u32,
    spec_address: f64,
) i32 {
    const spec = descriptionAt(spec_address) orelse return invalid;
    const base = buffer orelse return invalid;
    const realm = realmAt(realm_address) orelse return invalid;
    const id = countFromF64(pin_id) orelse return invalid;
    const bytes = countFromF64(pin_bytes) orelse return invalid;
    const offset = spec.address();
    const pin = owner.createIn(realm, .pin, id, bytes) catch return code(.out_of_memory);
    spec.setAddress(@intFromPtr(base) + offset);
    spec.setOwner(@intFromPtr(pin));
    const status = code(exports.fromDescription(spec, options | export_option.adopt_owner));
    // A failed export leaves the pin's only reference with us: releasing it queues the id, which
    // JS never recorded, so the sweep drops nothing.
    if (status != 0) {
        owner.release(pin);
        return status;
    }
    owed(abi.structEntry(@intCast(spec.address()), options & export_option.versioned != 0));
    return status;
}

/// The common export of a whole TypedArray in one call, its facts arguments (no description to
/// write or decode): 1-D, contiguous, the elements of `dtype` that fill `pin_bytes` bytes from
/// `buffer`'s first byte (the TypedArray's extent), on the CPU, pinned as `pin_id` of `realm` for
/// as long as the export lives. `word` carries the dtype, the flags and the options
/// (`abi.array_word`). Returns the managed struct's address, or minus a status code.
export fn dlpk_export_array(
    buffer: ?[*]u8,
    realm_address: f64,
    pin_id: f64,
    pin_bytes: f64,
    word: u32,
) f64 {
    const made = exportArray(buffer, realm_address, pin_id, pin_bytes, word);
    if (made > 0) owed(abi.structEntry(@intFromFloat(made), word >> abi.array_word.options_shift &
        export_option.versioned != 0));
    return made;
}

/// `dlpk_export_array` without the journal entry: for a caller that hands the struct on in the
/// same native call.
pub fn exportArray(
    buffer: ?[*]u8,
    realm_address: f64,
    pin_id: f64,
    pin_bytes: f64,
    word: u32,
) f64 {
    const refused: f64 = -@as(f64, @floatFromInt(invalid));
    const base = buffer orelse return refused;
    const realm = realmAt(realm_address) orelse return refused;
    const id = countFromF64(pin_id) orelse return refused;
    const bytes = countFromF64(pin_bytes) orelse return refused;
    const bits: usize = word >> abi.array_word.bits_shift & 0xff;
    const flags: u32 = word >> abi.array_word.flags_shift & 0xff;
    const options: u32 = word >> abi.array_word.options_shift;
    // Whole elements of a byte-sized type, known flags: the TS side read both from the array.
    if (bits == 0 or bits % 8 != 0 or bytes % (bits / 8) != 0 or flags & ~dlpack.flags_known != 0) {
        return refused;
    }
    const count = bytes / (bits / 8);
    const managed = exports.ofArray(base, realm, id, bytes, @intCast(count), .{
        .code = @truncate(word),
        .bits = @intCast(bits),
        .lanes = 1,
    }, flags, options) catch return -@as(f64, @floatFromInt(code(.out_of_memory)));
    return @floatFromInt(managed);
}

/// A count (an id, a number of bytes) the TS side passed: an integer in [0, 2^53), truncated.
pub fn countFromF64(value: f64) ?usize {
    if (!(value >= 0 and value < abi.exact_max_float)) return null;
    return @intFromFloat(value);
}

/// Calls a managed tensor's deleter (a capsule disposed before anyone took it), with the checks of
/// an import: nothing happens for a struct that is not readable, a deleter that is not code, or an
/// export of this library that an import took or that was released already.
export fn dlpk_managed_delete(managed_address: f64, versioned: u32) void {
    const managed = abi.addressFromF64(managed_address) orelse return;
    _ = admit.deleteChecked(managed, versioned != 0);
}

/// Disposes an export of this library that its JS side made and never handed out (a capsule
/// disposed from JS): the struct is released as its deleter would, and a pin it held the last
/// reference to is freed at once. Returns that pin's id (JS then drops the pinned object itself)
/// or 0; does nothing for anything but a live export of this library. `entry` is the struct's
/// journal entry, which JS journaled as the top entry (ended here first).
export fn dlpk_export_dispose(entry: f64) f64 {
    journal.end(journal.local(), entry);
    const managed = (abi.structOfEntry(entry) orelse return 0).address;
    if (!isStruct(managed)) return 0;
    // A live export is a whole record: anything shorter is refused by this one check.
    if (!mappings.readable(managed, exports.record_bytes)) return 0;
    return @floatFromInt(exports.disposeHeld(managed));
}

/// Whether `managed` was made by `dlpk_export` (1) or not (0).
export fn dlpk_is_own_export(managed_address: f64, versioned: u32) u32 {
    const managed = abi.addressFromF64(managed_address) orelse return 0;
    if (!isStruct(managed) or !mappings.readable(managed, @sizeOf(dlpack.ManagedTensor))) return 0;
    const own = exports.recognize(managed) orelse return 0;
    return @intFromBool(own.versioned == (versioned != 0) and own.state != .released);
}

/// Allocates library memory; writes its address and owner into the description at `out_address`.
export fn dlpk_alloc(bytes: f64, alignment: f64, zero: u32, out_address: f64) i32 {
    const out = descriptionAt(out_address) orelse return invalid;
    const size = abi.integerFromF64(bytes) orelse return code(.overflow);
    const align_bytes = abi.integerFromF64(alignment) orelse return invalid;
    if (size < 0) return code(.overflow);
    if (align_bytes <= 0 or align_bytes > memory.alignment_max_bytes) return invalid;
    if (!std.math.isPowerOfTwo(align_bytes)) return invalid;
    const created = owner.createNative(@intCast(size), @intCast(align_bytes), zero != 0) catch
        return code(.out_of_memory);
    out.setAddress(created.payload);
    out.setOwner(@intFromPtr(created));
    owed(abi.ownerEntry(@intFromPtr(created)));
    return 0;
}

/// Copies the strided tensor the description at `spec_address` describes (address, ndim, shape,
/// strides) into `dst` in C order, `itemsize` bytes per element.
export fn dlpk_copy(spec_address: f64, dst_address: f64, itemsize: u32) i32 {
    const spec = descriptionAt(spec_address) orelse return invalid;
    const dst = abi.addressFromF64(dst_address) orelse return invalid;
    return code(memory.copyDescribed(spec, dst, itemsize));
}

/// The scalar of type `kind` (`abi.Load`) at `address`, any alignment, for runtimes whose own
/// pointer reads cost several FFI calls (Deno's `UnsafePointerView`). The caller guarantees the
/// bytes are readable (a live view's element); NaN for an address outside user space or an
/// unknown kind.
export fn dlpk_load(address: f64, kind: u32) f64 {
    const nan = std.math.nan(f64);
    const at = elementAddress(address) orelse return nan;
    const load = std.meta.intToEnum(abi.Load, kind) catch return nan;
    return memory.loadScalar(at, load);
}

/// The address of one element that `dlpk_load` or `dlpk_store` is handed: a whole number from the
/// first page up (below 2^53, the most an f64 holds exactly, and so inside `abi.address_limit`).
fn elementAddress(value: f64) ?usize {
    comptime assert(abi.exact_max_float <= @as(f64, @floatFromInt(abi.address_limit)));
    const address = abi.addressFromF64(value) orelse return null;
    return if (address >= abi.address_min) address else null;
}

/// Copies the element `set()` staged at `src_address` (`bytes`: 1-16) to `dst_address`, any
/// alignment: one call with no description to fill, where the general `dlpk_copy` takes one.
export fn dlpk_store(dst_address: f64, src_address: f64, bytes: u32) i32 {
    const dst = elementAddress(dst_address) orelse return invalid;
    const src = elementAddress(src_address) orelse return invalid;
    if (bytes == 0 or bytes > memory.element_bytes_max) return invalid;
    memory.storeElement(dst, src, bytes);
    return 0;
}

fn ownerAt(value: f64) ?*owner.Owner {
    const address = abi.addressFromF64(value) orelse return null;
    if (address == 0 or address % @alignOf(owner.Owner) != 0) return null;
    return @ptrFromInt(address);
}

/// A new reference on the owner record at `address`, journaled for the JS holder it is for.
export fn dlpk_owner_retain(address: f64) void {
    const record = ownerAt(address) orelse return;
    owner.retain(record);
    owed(abi.ownerEntry(@intFromPtr(record)));
}

export fn dlpk_owner_release(address: f64) void {
    owner.release(ownerAt(address) orelse return);
}

/// The address of this thread's journal of releases (see journal.zig), which JS views.
export fn dlpk_journal() f64 {
    return @floatFromInt(@intFromPtr(journal.local()));
}

/// Releases what the top entry, `value`, stands for (an owner record or a managed struct: abi.zig's
/// journal entries). The entry ends before anything else (journal.zig).
export fn dlpk_journal_release(value: f64) void {
    journal.end(journal.local(), value);
    releaseEntry(value);
}

/// Ends the top entry of this thread's journal and releases what it holds (the deferred replay);
/// nothing when the journal holds no stored entry.
export fn dlpk_journal_replay() void {
    releaseEntry(journal.pop(journal.local()) orelse return);
}

fn releaseEntry(value: f64) void {
    if (value > 0) {
        // perf(native import): inlined, for the same thread-local lookup as `admit.record`'s.
        @call(.always_inline, owner.release, .{ownerAt(value) orelse return});
        return;
    }
    const managed = abi.structOfEntry(value) orelse return;
    _ = admit.deleteChecked(managed.address, managed.versioned);
}

/// 1 while this thread runs a producer's deleter (which may be a JS callback calling back into
/// the library), else 0: JS then leaves its journal of releases under way alone.
export fn dlpk_inside_deleter() u32 {
    return @intFromBool(dlpack.insideDeleter());
}

pub fn realmAt(value: f64) ?*owner.Realm {
    const address = abi.addressFromF64(value) orelse return null;
    if (address == 0 or address % @alignOf(owner.Realm) != 0) return null;
    return @ptrFromInt(address);
}

/// A new realm record for one JS realm (the main program, each Worker, each isolate): its address,
/// or 0 when out of memory. Never freed (a realm cannot announce its end); see owner.Realm.
export fn dlpk_realm_new() f64 {
    const realm = owner.createRealm() catch return 0;
    return @floatFromInt(@intFromPtr(realm));
}

/// A pin owner of `realm` for the JS object `id`: its release is queued for that realm alone. The
/// JS side keeps the object reachable until the id comes back from `dlpk_pins_drain`.
export fn dlpk_pin_new(realm_address: f64, id: f64, bytes: f64, out_address: f64) i32 {
    const out = descriptionAt(out_address) orelse return invalid;
    const realm = realmAt(realm_address) orelse return invalid;
    const pin_id = countFromF64(id) orelse return invalid;
    const pin_bytes = countFromF64(bytes) orelse return invalid;
    const created = owner.createIn(
        realm,
        .pin,
        pin_id,
        pin_bytes,
    ) catch return code(.out_of_memory);
    out.setOwner(@intFromPtr(created));
    owed(abi.ownerEntry(@intFromPtr(created)));
    return 0;
}

/// Pins JS memory for a view over it (`fromArray`, and a copy's staged source): `buffer` is the
/// TypedArray's data (passed by the runtime's FFI, so JS never computes the address; NULL only for
/// an empty one), pinned as `pin_id` of `realm` (`pin_bytes` bytes, the TypedArray's extent) for as
/// long as the owner record lives. Writes the owner record and the data address into this thread's
/// scratch as the imports do (`KeyedDescription.owner`, `.address`) and journals the owner.
export fn dlpk_pin_buffer(buffer: ?[*]u8, realm_address: f64, pin_id: f64, pin_bytes: f64) i32 {
    const realm = realmAt(realm_address) orelse return invalid;
    const id = countFromF64(pin_id) orelse return invalid;
    const bytes = countFromF64(pin_bytes) orelse return invalid;
    if (buffer == null and bytes != 0) return invalid;
    const pin = owner.createIn(realm, .pin, id, bytes) catch return code(.out_of_memory);
    const data: usize = @intFromPtr(buffer);
    assert(data < abi.exact_max);
    thread_scratch.owner = abi.ownerEntry(@intFromPtr(pin));
    thread_scratch.address = @floatFromInt(data);
    owed(thread_scratch.owner);
    return 0;
}

/// Makes the pin owner at `pin_address` attachable from another realm (an export of a
/// SharedArrayBuffer made on a Worker); returns its token, or 0 when that is not possible.
export fn dlpk_pin_share(pin_address: f64) f64 {
    const pin = ownerAt(pin_address) orelse return 0;
    if (pin.kind != .pin or pin.shared_token != 0) return 0;
    const token = owner.share(pin) catch return 0;
    return @floatFromInt(token);
}

/// Pins JS object `id` of `realm` for as long as the shared pin `token` lives. 0: kept; 1: that
/// pin is gone already (nothing to keep; the id is queued and swept like any release).
export fn dlpk_pin_keep(token: f64, realm_address: f64, id: f64, bytes: f64) i32 {
    const realm = realmAt(realm_address) orelse return invalid;
    if (!(token >= 1 and token < abi.exact_max_float)) return invalid;
    const pin_id = countFromF64(id) orelse return invalid;
    const pin_bytes = countFromF64(bytes) orelse return invalid;
    const keeper = owner.createIn(realm, .pin, pin_id, pin_bytes) catch return code(.out_of_memory);
    if (owner.keep(@intFromFloat(token), keeper)) return 0;
    owner.release(keeper);
    return 1;
}

/// Whether the shared pin `token` has a keeper (1), still waits for one (0), or is gone (-1).
export fn dlpk_pin_kept(token: f64) i32 {
    if (!(token >= 1 and token < abi.exact_max_float)) return -1;
    return switch (owner.keptState(@intFromFloat(token))) {
        .kept => 1,
        .waiting => 0,
        .gone => -1,
    };
}

/// How many JS realms using this library have not ended.
export fn dlpk_realms_live() u32 {
    return owner.liveRealms();
}

export fn dlpk_pins_drain(realm_address: f64, out_address: f64, capacity: u32) u32 {
    const realm = realmAt(realm_address) orelse return 0;
    const address = abi.addressFromF64(out_address) orelse return 0;
    if (address == 0 or address % 8 != 0) return 0;
    const out: [*]f64 = @ptrFromInt(address);
    return @intCast(owner.drainRealm(realm, out[0..capacity]));
}

export fn dlpk_stats(out_address: f64) u32 {
    const address = abi.addressFromF64(out_address) orelse return 0;
    if (address == 0 or address % 8 != 0) return 0;
    stats.snapshot(@ptrFromInt(address));
    return stats.counter_count;
}

// ---------------------------------------------------------------------------------------------
// The imports, into this thread's `KeyedDescription` (the scratch), whose generation tells the
// caller with one word whether the facts it built for the last import still apply.

/// This thread's keyed description, which JS uses as its scratch for every native call: the
/// one-argument imports below write into it without being told where it is (each FFI argument
/// costs Bun's calls about a nanosecond). Per thread, like the journal, so that copies of the JS
/// module in one realm share it, and workers each have their own.
pub threadlocal var thread_scratch: abi.KeyedDescription = std.mem.zeroes(abi.KeyedDescription);

/// The address of this thread's scratch (see `thread_scratch`), which JS views.
export fn dlpk_scratch() f64 {
    return @floatFromInt(@intFromPtr(&thread_scratch));
}

/// Validates a managed tensor and, when it is accepted, makes an owner holding it: validate ->
/// check the device claim -> take this library's own export -> record the owner (admit.zig). A
/// refused tensor goes back to its producer (deleter called once) before this returns, unless
/// the caller asked to keep it, or its deleter cannot be called safely (`admit.releaseRefused`).
/// The import of either generation with any option, the one door besides the versioned one below:
/// `managed` is a 64-bit word (a JS number or bigint; the JS side binds this function a second
/// time with a pointer parameter for the pointer objects Deno's FFI hands out). An address at or
/// above 2^53 is refused before anything is read. A struct JS journaled (a capsule it took for this
/// import) is the import's from here on: its entry ends first, and the import holds or releases it.
/// Writes this thread's scratch; on success its generation changes unless the facts equal the last
/// keyed import's, and the owner record is journaled.
export fn dlpk_import(managed: usize, options: u32) i32 {
    const out = &thread_scratch.description;
    if (managed >= abi.exact_max) return refuseInexact(out);
    journal.end(journal.local(), abi.structEntry(managed, options & import_option.versioned != 0));
    return importKeyed(managed, options, out);
}

/// `dlpk_import` of a versioned struct at an address passed as an f64: the import users make most,
/// with one argument (each FFI argument costs Bun's calls about a nanosecond).
export fn dlpk_import_versioned(managed_address: f64) i32 {
    const out = &thread_scratch.description;
    const managed = abi.addressFromF64(managed_address) orelse return refuseInexact(out);
    return importKeyed(managed, import_option.versioned, out);
}

/// The keyed entries' common path, inlined into each with the validator and the owner record:
/// every JS import takes it. perf(native import): their call frames were measurable.
inline fn importKeyed(managed: usize, options: u32, out: *Description) i32 {
    const status = @call(.always_inline, importAt, .{ managed, options, out });
    // A keyed record starts with its description (abi.zig); the caller passed a whole record.
    comptime assert(@offsetOf(abi.KeyedDescription, "description") == 0);
    if (status == 0) {
        const keyed: *abi.KeyedDescription = @ptrCast(out);
        describe.keyFacts(keyed);
        owed(keyed.owner);
    }
    return status;
}

test "the general door refuses an address no f64 holds exactly before reading anything" {
    const generation = thread_scratch.generation;
    const refused = code(.bad_address);
    try std.testing.expectEqual(refused, dlpk_import(abi.exact_max, 1));
    try std.testing.expectEqual(refused, dlpk_import(std.math.maxInt(usize), 1));
    try std.testing.expectEqual(generation, thread_scratch.generation);
}

var one_argument_deletes: u32 = 0;

fn countDelete(_: *dlpack.ManagedTensorVersioned) callconv(.c) void {
    one_argument_deletes += 1;
}

test "both doors write this thread's scratch" {
    const testing = std.testing;
    try testing.expectEqual(@as(f64, @floatFromInt(@intFromPtr(&thread_scratch))), dlpk_scratch());
    var data = [_]f32{ 1, 2, 3 };
    var shape = [_]i64{3};
    var strides = [_]i64{1};
    var managed = std.mem.zeroes(dlpack.ManagedTensorVersioned);
    managed.version = .{ .major = dlpack.version_major, .minor = 0 };
    managed.deleter = countDelete;
    managed.dl_tensor = .{
        .data = &data,
        .device = .{ .device_type = 1, .device_id = 0 },
        .ndim = 1,
        .dtype = .{ .code = 2, .bits = 32, .lanes = 1 },
        .shape = &shape,
        .strides = &strides,
        .byte_offset = 4,
    };
    const at: f64 = @floatFromInt(@intFromPtr(&managed));
    const before = one_argument_deletes;
    for (0..2) |round| {
        const status = if (round == 0)
            dlpk_import_versioned(at)
        else
            dlpk_import(@intFromPtr(&managed), import_option.versioned);
        try testing.expectEqual(@as(i32, 0), status);
        const element: f64 = @floatFromInt(@intFromPtr(&data) + 4);
        try testing.expectEqual(element, thread_scratch.address);
        try testing.expectEqual(@as(f64, 3), thread_scratch.description.shape[0]);
        try testing.expect(thread_scratch.owner > 0);
        // The owner record is journaled for the JS view, and the release ends that entry.
        const j = journal.local();
        try testing.expectEqual(thread_scratch.owner, j.entries[@intCast(j.count - 1)]);
        const count = j.count;
        dlpk_journal_release(thread_scratch.owner);
        try testing.expectEqual(count - 1, j.count);
        try testing.expectEqual(before + round + 1, one_argument_deletes);
    }
    // Refusals are reported there too: no address an f64 holds exactly, then NULL.
    try testing.expectEqual(code(.bad_address), dlpk_import_versioned(abi.exact_max_float));
    try testing.expectEqual(code(.bad_address), thread_scratch.description.status);
    try testing.expectEqual(code(.null_managed), dlpk_import(0, import_option.versioned));
    try testing.expectEqual(code(.null_managed), thread_scratch.description.status);
    try testing.expectEqual(before + 2, one_argument_deletes);
}

test "a whole array exported in one call: its struct, its pin, and the refusals" {
    const testing = std.testing;
    var realm: owner.Realm = .{};
    var values = [_]f32{ 1, 2, 3, 4 };
    const base: [*]u8 = @ptrCast(&values);
    const realm_f: f64 = @floatFromInt(@intFromPtr(&realm));
    const float32: u32 = 2 | 32 << abi.array_word.bits_shift;
    const versioned = export_option.versioned << abi.array_word.options_shift;
    const read_only = dlpack.flag.read_only << abi.array_word.flags_shift;
    const pins_before = stats.get(.pins);
    const bad = -@as(f64, @floatFromInt(invalid));
    // Bytes that are no whole number of elements, sub-byte or no bits, an unknown flag, a NULL
    // buffer, an id that is no count.
    try testing.expectEqual(bad, dlpk_export_array(base, realm_f, 5, 15, float32 | versioned));
    try testing.expectEqual(bad, dlpk_export_array(base, realm_f, 5, 16, 2 | 4 << 8 | versioned));
    try testing.expectEqual(bad, dlpk_export_array(base, realm_f, 5, 16, 2 | versioned));
    const unknown = 0x80 << abi.array_word.flags_shift;
    try testing.expectEqual(bad, dlpk_export_array(base, realm_f, 5, 16, float32 | unknown));
    try testing.expectEqual(bad, dlpk_export_array(null, realm_f, 5, 16, float32 | versioned));
    try testing.expectEqual(bad, dlpk_export_array(base, realm_f, -1, 16, float32 | versioned));
    try testing.expectEqual(pins_before, stats.get(.pins));
    const j = journal.local();
    const count_before = j.count;
    const made = dlpk_export_array(base, realm_f, 5, 16, float32 | read_only | versioned);
    try testing.expect(made > 0);
    const managed: usize = @intFromFloat(made);
    // Journaled for the JS holder, which ends the entry once its capsule holds the struct.
    try testing.expectEqual(count_before + 1, j.count);
    try testing.expectEqual(abi.structEntry(managed, true), j.entries[@intCast(count_before)]);
    j.count = count_before;
    const m: *const dlpack.ManagedTensorVersioned = @ptrFromInt(managed);
    try testing.expectEqual(@as(?*anyopaque, @ptrCast(&values)), m.dl_tensor.data);
    try testing.expectEqual(@as(i32, 1), m.dl_tensor.ndim);
    try testing.expectEqual(@as(i64, 4), m.dl_tensor.shape.?[0]);
    try testing.expectEqual(@as(i64, 1), m.dl_tensor.strides.?[0]);
    try testing.expectEqual(@as(u8, 2), m.dl_tensor.dtype.code);
    try testing.expectEqual(@as(u8, 32), m.dl_tensor.dtype.bits);
    try testing.expectEqual(dlpack.flag.read_only, m.flags);
    try testing.expectEqual(pins_before + 1, stats.get(.pins));
    // Released by a consumer: the pin's id is queued for the realm, once.
    dlpack.deleteManaged(managed, true);
    var out: [4]f64 = undefined;
    try testing.expectEqual(@as(usize, 1), owner.drainRealm(&realm, &out));
    try testing.expectEqual(@as(f64, 5), out[0]);
    try testing.expectEqual(pins_before, stats.get(.pins));
    // A legacy one, disposed by its JS holder: the pin is freed at once.
    const legacy: usize = @intFromFloat(dlpk_export_array(base, realm_f, 6, 8, float32));
    try testing.expect(exports.isOwnExport(legacy, false));
    // Its capsule's journal entry (pushed by the export) is the top entry, which ends first.
    const entry = abi.structEntry(legacy, false);
    j.entries[0] = entry;
    j.count = 1;
    try testing.expectEqual(@as(f64, 6), dlpk_export_dispose(entry));
    try testing.expectEqual(@as(i32, 0), j.count);
    try testing.expectEqual(@as(usize, 0), owner.drainRealm(&realm, &out));
}

test "a buffer pinned for a view: its owner journaled, its address in the scratch, its id queued" {
    const testing = std.testing;
    var realm: owner.Realm = .{};
    const realm_f: f64 = @floatFromInt(@intFromPtr(&realm));
    var values = [_]f32{ 1, 2, 3, 4 };
    const base: [*]u8 = @ptrCast(&values);
    const pins_before = stats.get(.pins);
    try testing.expectEqual(invalid, dlpk_pin_buffer(null, realm_f, 3, 16));
    try testing.expectEqual(invalid, dlpk_pin_buffer(base, realm_f, -1, 16));
    const j = journal.local();
    const count = j.count;
    try testing.expectEqual(@as(i32, 0), dlpk_pin_buffer(base, realm_f, 3, 16));
    try testing.expectEqual(@as(f64, @floatFromInt(@intFromPtr(base))), thread_scratch.address);
    try testing.expectEqual(count + 1, j.count);
    try testing.expectEqual(thread_scratch.owner, j.entries[@intCast(count)]);
    try testing.expectEqual(pins_before + 1, stats.get(.pins));
    // The view's release ends the entry; the id comes back to its realm once.
    dlpk_journal_release(thread_scratch.owner);
    try testing.expectEqual(count, j.count);
    var out: [4]f64 = undefined;
    try testing.expectEqual(@as(usize, 1), owner.drainRealm(&realm, &out));
    try testing.expectEqual(@as(f64, 3), out[0]);
    // An empty TypedArray may come as NULL: a pin of nothing.
    try testing.expectEqual(@as(i32, 0), dlpk_pin_buffer(null, realm_f, 4, 0));
    try testing.expectEqual(@as(f64, 0), thread_scratch.address);
    dlpk_journal_release(thread_scratch.owner);
    try testing.expectEqual(@as(usize, 1), owner.drainRealm(&realm, &out));
    try testing.expectEqual(pins_before, stats.get(.pins));
}

test "journaled releases end their entry, whatever it holds" {
    const testing = std.testing;
    const j = journal.local();
    defer j.count = 0;
    j.entries[0] = 12345; // not an owner record: nothing released
    j.count = 1;
    dlpk_journal_release(12345);
    try testing.expectEqual(@as(i32, 0), j.count);
    j.entries[0] = -2 * 4096 - 1; // a struct in the first page: not readable, nothing deleted
    j.count = 1;
    dlpk_journal_replay();
    try testing.expectEqual(@as(i32, 0), j.count);
    j.entries[0] = -16;
    j.count = 1;
    try testing.expectEqual(@as(f64, 0), dlpk_export_dispose(-16));
    try testing.expectEqual(@as(i32, 0), j.count);
    // Nothing journaled, or a value that is no address: nothing happens.
    dlpk_journal_replay();
    dlpk_journal_release(0.5);
    dlpk_journal_release(-0.5);
    try testing.expectEqual(@as(f64, 0), dlpk_export_dispose(0));
    try testing.expectEqual(@as(i32, 0), j.count);
    try testing.expectEqual(@intFromPtr(j), @as(usize, @intFromFloat(dlpk_journal())));
}

test "dlpk_load reads a scalar in place and refuses what is no user-space address" {
    const value: f32 = 0.25;
    const address: f64 = @floatFromInt(@intFromPtr(&value));
    try std.testing.expectEqual(@as(f64, 0.25), dlpk_load(address, @intFromEnum(abi.Load.f32)));
    try std.testing.expect(std.math.isNan(dlpk_load(address, 8)));
    try std.testing.expect(std.math.isNan(dlpk_load(0, @intFromEnum(abi.Load.u8))));
    try std.testing.expect(std.math.isNan(dlpk_load(address + 0.5, @intFromEnum(abi.Load.u8))));
    try std.testing.expect(std.math.isNan(dlpk_load(-4096, @intFromEnum(abi.Load.u8))));
    try std.testing.expect(std.math.isNan(dlpk_load(4095, @intFromEnum(abi.Load.u8))));
    try std.testing.expect(std.math.isNan(dlpk_load(0x1p53, @intFromEnum(abi.Load.u8))));
}

test "dlpk_store copies one element and refuses a bad width or address" {
    const src: [2]f64 = .{ 1.5, -2.5 };
    var dst: [2]f64 = .{ 0, 0 };
    const from: f64 = @floatFromInt(@intFromPtr(&src));
    const to: f64 = @floatFromInt(@intFromPtr(&dst));
    try std.testing.expectEqual(@as(i32, 0), dlpk_store(to, from, 16));
    try std.testing.expectEqual(src, dst);
    try std.testing.expectEqual(invalid, dlpk_store(to, from, 0));
    try std.testing.expectEqual(invalid, dlpk_store(to, from, 17));
    try std.testing.expectEqual(invalid, dlpk_store(0, from, 4));
    try std.testing.expectEqual(invalid, dlpk_store(to, 0.5, 4));
    try std.testing.expectEqual(invalid, dlpk_store(to, 4095, 4));
    try std.testing.expectEqual(invalid, dlpk_store(0x1p53, from, 4));
}
