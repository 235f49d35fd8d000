//! Fuzzes libdlpack's import validator through its C ABI (`dlpk_import`), playing a producer that
//! builds managed tensors of both generations from random fields (hostile ones included) over
//! memory it really allocates, with shape and strides arrays of exactly `ndim` entries.
//!
//! Every case must end one of two ways:
//! - refused: the status is one of the refusals an independent model of the rules (below, in
//!   i256 so it cannot overflow) says apply, and the producer's deleter ran exactly once (or not
//!   at all when the case asked to keep the tensor or had no deleter);
//! - accepted: the model says nothing applies, the description matches the model field by field,
//!   every element's bytes (all of them up to 4096 elements, a sample beyond) lie inside the
//!   allocation the producer made and are read, and releasing the owner runs the deleter once.
//! Some accepted cases are also re-exported (`dlpk_export`) and re-imported, and must describe the
//! same memory; some of those exports are then imported as the wrong generation (refused and
//! released once through the real deleter), twice (the second refused), or after their release
//! (refused). The live counters return to where they were after every case.
//!
//! About one case in six is hostile memory: the struct in a PROT_NONE page, an unmapped page, a
//! page just unmapped, near the top of user space or running into a PROT_NONE page; the shape or
//! strides array in such places; a deleter that is not code (data, the stack, unmapped and
//! non-canonical addresses); or the struct passed as the other generation. Each must be refused
//! before anything unreadable is read, and no deleter that is not code may ever be called: a crash
//! ends the run. A struct of the wrong generation may end in any status, but calls no deleter.
//! The data range of host memory (CPU, CUDAHost, CUDAManaged, ROCMHost) that is not allocated is
//! hostile too: in a PROT_NONE or unmapped page, running into one, in the first page, near the top
//! of user space or beyond it (refused), or in read-only memory (accepted read-only, and read);
//! random addresses are judged against the fuzzer's own reading of /proc/self/maps.
//!
//! Three drivers share the case generator: `run` (a seeded run: `zig build fuzz -- --seed N
//! --cases N` or `--seconds N`), the unit tests (a short seeded run plus regressions), and
//! `LLVMFuzzerTestOneInput` for coverage-guided runs under libFuzzer (tools/fuzz.sh), where the
//! generator draws its choices from the fuzzer's bytes.

const std = @import("std");
const builtin = @import("builtin");
const abi = @import("abi.zig");
const listing = @import("listing.zig");

/// The library under test, linked into this executable (its `export fn`s are what abi.zig
/// declares); the model reads nothing else of it but the dtype table.
const libdlpack = @import("libdlpack");

comptime {
    _ = libdlpack;
}

const rank_max = abi.rank_max;
const exact_max: i256 = abi.exact_max;
const u64_max: i256 = std.math.maxInt(u64);
/// Honest cases allocate at most this much; larger spans get a fake (never touched) address.
const alloc_bytes_max: i256 = 1 << 20;
/// Up to this many elements every element is checked; beyond it, a sample plus the extremes.
const full_check_elements_max = 4096;

// ---------------------------------------------------------------------------------------------
// The producer: one heap record per tensor, freed by its deleter.

var deleter_calls: u32 = 0;

const Produced = struct {
    versioned: bool,
    managed: usize,
    shape: ?[*]i64,
    strides: ?[*]i64,
    data: ?[*]u8,
    data_len: usize,
    has_deleter: bool,

    fn free(self: *Produced) void {
        std.c.free(@ptrFromInt(self.managed));
        if (self.shape) |p| std.c.free(p);
        if (self.strides) |p| std.c.free(p);
        if (self.data) |p| std.c.free(p);
        std.c.free(self);
    }
};

fn versionedDeleter(m: *abi.Versioned) callconv(.c) void {
    deleter_calls += 1;
    @as(*Produced, @ptrFromInt(m.manager_ctx)).free();
}

fn legacyDeleter(m: *abi.Legacy) callconv(.c) void {
    deleter_calls += 1;
    @as(*Produced, @ptrFromInt(m.manager_ctx)).free();
}

fn mallocExact(bytes: usize) error{OutOfMemory}![*]u8 {
    // Exact sizes (never rounded up) so valgrind flags any read one byte past what was promised.
    const p = std.c.malloc(@max(bytes, 1)) orelse return error.OutOfMemory;
    return @ptrCast(p);
}

// ---------------------------------------------------------------------------------------------
// Random fields

const Fields = struct {
    null_managed: bool,
    /// Instead of the struct's address, pass one that cannot be a struct: 0 means no, 1..7 the
    /// struct's address plus that (misaligned), anything else that address itself.
    bad_managed: usize,
    versioned: bool,
    major: u32,
    minor: u32,
    flags: u64,
    ndim: i32,
    code: u8,
    bits: u8,
    lanes: u16,
    device_type: i32,
    device_id: i32,
    shape_null: bool,
    strides_null: bool,
    shape: [rank_max]i64,
    strides: [rank_max]i64,
    strict: bool,
    keep: bool,
    has_deleter: bool,
    /// Hostile memory: where the struct, its shape array and its strides array really lie.
    struct_at: Place = .real,
    shape_at: Place = .real,
    strides_at: Place = .real,
    /// A deleter that is not code, written over the real one (0: none).
    bad_deleter: u64 = 0,
    /// The struct is passed as the other generation.
    mixed: bool = false,
    /// Chosen once the model has seen the layout.
    byte_offset: u64 = 0,
    data: usize = 0,
    data_len: usize = 0,
    /// The allocation's first byte when `allocated` (element 0 may sit anywhere inside it).
    alloc_base: usize = 0,
    allocated: bool = false,
    /// Where an unallocated data range of host memory was put (`.listed`: judged from the
    /// listing), and what the model expects of it.
    data_at: DataPlace = .listed,
    /// The bytes the elements are read from when the tensor is accepted: the allocation, or a
    /// readable hostile place (0 bytes: nothing to read).
    span_base: usize = 0,
    span_len: usize = 0,
};

/// Where the data range of host memory lies when the producer did not allocate it (see
/// `Guard.data_base` for the pages).
const DataPlace = enum(u8) {
    /// Any address: the model reads /proc/self/maps itself.
    listed,
    prot_none,
    unmapped,
    /// From the read-write page into the PROT_NONE one.
    into_prot_none,
    /// Inside the read-only page (or from it on into the PROT_NONE page when longer).
    read_only,
    /// From the read-write page into the read-only one (and beyond it when longer).
    into_read_only,
    /// In the never-mapped first page.
    low,
    /// Up to 2^47, the top of x86-64 user space (judged from the listing elsewhere).
    top,
    /// Between 2^48 and 2^53: beyond every 48-bit user space.
    beyond,
};

/// What the model expects of a data range.
const DataAccess = listing.Access;

/// Where a struct or array really lies (see `Guard`).
const Place = enum(u8) {
    real,
    /// In the guard's PROT_NONE page.
    prot_none,
    /// In the guard's unmapped page.
    unmapped,
    /// Starting in the guard's readable page and running into the PROT_NONE page.
    straddle,
    /// In a page mapped and unmapped just before the import (structs only).
    just_unmapped,
    /// Just below 2^47, the top of x86-64 user space (structs only).
    top,
};

/// Pages for hostile addresses, at an address range nothing else in this process uses (the
/// library's table of mappings cannot notice memory unmapped after it read the table, so a page
/// that was once readable and listed must never be offered as unreadable): a readable page, a
/// PROT_NONE page, and an unmapped one. Pages "just unmapped" come from a second range, each used
/// once.
const Guard = struct {
    const page = std.heap.page_size_min;
    const base: usize = 0x3c00_0000_0000;
    /// Data pages: read-write, read-only, PROT_NONE.
    const data_base: usize = 0x3c10_0000_0000;
    const fresh_base: usize = 0x3b00_0000_0000;
    var ready = false;
    var fresh_next: usize = fresh_base;
    /// Where the heap, the stack or static data are mapped executable (valgrind maps its malloc's
    /// arena read-write-execute; so do kernels that make READ_IMPLIES_EXEC processes), data there
    /// is code to a check of the mappings. Cases that rely on data not being code are left out
    /// then.
    var data_is_code = false;

    fn init() !void {
        if (ready) return;
        const heap = std.c.malloc(16) orelse return error.OutOfMemory;
        defer std.c.free(heap);
        var on_stack: u64 = 0;
        const static = @intFromPtr(&a_static_word);
        for ([_]usize{ @intFromPtr(heap), @intFromPtr(&on_stack), static }) |where| {
            if (executableHere(where)) data_is_code = true;
        }
        const region = try std.posix.mmap(
            @ptrFromInt(base),
            3 * page,
            std.posix.PROT.READ | std.posix.PROT.WRITE,
            .{ .TYPE = .PRIVATE, .ANONYMOUS = true },
            -1,
            0,
        );
        if (@intFromPtr(region.ptr) != base) return error.GuardRegionTaken;
        try std.posix.mprotect(@alignCast(region[page .. 2 * page]), std.posix.PROT.NONE);
        std.posix.munmap(@alignCast(region[2 * page ..]));
        const data = try std.posix.mmap(
            @ptrFromInt(data_base),
            3 * page,
            std.posix.PROT.READ | std.posix.PROT.WRITE,
            .{ .TYPE = .PRIVATE, .ANONYMOUS = true },
            -1,
            0,
        );
        if (@intFromPtr(data.ptr) != data_base) return error.GuardRegionTaken;
        @memset(data[0 .. 2 * page], 0x5a);
        try std.posix.mprotect(@alignCast(data[page .. 2 * page]), std.posix.PROT.READ);
        try std.posix.mprotect(@alignCast(data[2 * page ..]), std.posix.PROT.NONE);
        ready = true;
    }

    fn readableEnd() usize {
        return base + page;
    }

    /// A page that was mapped (never listed: nothing imports while it is) and is now unmapped.
    fn justUnmapped() error{OutOfMemory}!usize {
        const at = fresh_next;
        fresh_next += 2 * page;
        const region = std.posix.mmap(
            @ptrFromInt(at),
            page,
            std.posix.PROT.READ | std.posix.PROT.WRITE,
            .{ .TYPE = .PRIVATE, .ANONYMOUS = true },
            -1,
            0,
        ) catch
            return error.OutOfMemory;
        std.posix.munmap(region);
        return @intFromPtr(region.ptr);
    }

    /// Where a struct of `size` bytes, or an array of `size` bytes, is put for `place`.
    fn address(where: Place, size: usize) error{OutOfMemory}!usize {
        return switch (where) {
            .real => unreachable,
            .prot_none => base + page + 64,
            .unmapped => base + 2 * page + 128,
            // 8 bytes of it readable, the rest in the PROT_NONE page.
            .straddle => readableEnd() - 8,
            .just_unmapped => (try justUnmapped()) + 256,
            .top => (1 << 47) - @max(size, 64),
        };
    }
};

/// The library's own dtype table (zig/src/dlpack.zig `dtypes`): the validator, this model and
/// src/facts/abi.ts read the same list.
const supported_dtypes = libdlpack.dlpack.dtypes;

fn dtypeSupported(code: u8, bits: u8, lanes: u16) bool {
    if (lanes != 1) return false;
    for (supported_dtypes) |d| {
        if (@intFromEnum(d.code) == code and d.bits == bits) return true;
    }
    return false;
}

fn deviceKnown(t: i32) bool {
    return (t >= 1 and t <= 4) or (t >= 7 and t <= 18);
}

fn chance(r: std.Random, percent: u8) bool {
    return r.uintLessThan(u8, 100) < percent;
}

fn hostileI64(r: std.Random) i64 {
    const table = [_]i64{
        -1,
        std.math.minInt(i64),
        std.math.maxInt(i64),
        1 << 31,
        1 << 32,
        1 << 53,
        (1 << 53) + 1,
        1 << 62,
        -(1 << 62),
        (1 << 53) - 1,
        std.math.maxInt(
            i32,
        ),
        std.math.minInt(i32),
    };
    if (chance(r, 70)) return table[r.uintLessThan(usize, table.len)];
    return r.int(i64);
}

fn generate(r: std.Random) Fields {
    var f: Fields = undefined;
    // The draws keep one order (header, kinds, layout, then the rest): a seed replays its cases.
    generateHeader(r, &f);
    generateKinds(r, &f);
    generateLayout(r, &f);
    f.strict = chance(r, 10);
    f.keep = chance(r, 5);
    f.has_deleter = !chance(r, 6);
    generateHostile(r, &f);
    return f;
}

/// The address passed, the generation, the version and the flags.
fn generateHeader(r: std.Random, f: *Fields) void {
    f.null_managed = r.uintLessThan(u16, 400) == 0;
    f.bad_managed = if (r.uintLessThan(u16, 300) != 0) 0 else switch (r.uintLessThan(u8, 4)) {
        0 => r.intRangeAtMost(usize, 1, 7),
        1 => r.intRangeAtMost(usize, 8, 4095) & ~@as(usize, 7),
        2 => @as(usize, 1) << 56,
        else => std.math.maxInt(usize) & ~@as(usize, 7),
    };
    f.versioned = r.boolean();
    f.major = if (chance(r, 92)) 1 else switch (r.uintLessThan(u8, 3)) {
        0 => 0,
        1 => 2,
        else => r.int(u32),
    };
    f.minor = if (chance(r, 80)) r.uintLessThan(u32, 5) else r.int(u32);
    f.flags = if (chance(r, 60))
        0
    else if (chance(r, 75))
        r.uintLessThan(u64, 8)
    else if (r.boolean())
        @as(u64, 1) << r.int(u6)
    else
        r.int(u64);
}

/// Rank, dtype and device.
fn generateKinds(r: std.Random, f: *Fields) void {
    f.ndim = if (chance(r, 80))
        @as(i32, r.uintLessThan(u8, 6))
    else if (chance(r, 60))
        r.intRangeAtMost(i32, 6, 64)
    else switch (r.uintLessThan(u8, 5)) {
        0 => 65,
        1 => -1,
        2 => std.math.maxInt(i32),
        3 => std.math.minInt(i32),
        else => r.int(i32),
    };
    if (chance(r, 90)) {
        const d = supported_dtypes[r.uintLessThan(usize, supported_dtypes.len)];
        f.code = @intFromEnum(d.code);
        f.bits = d.bits;
        f.lanes = 1;
    } else {
        f.code = if (r.boolean()) r.uintLessThan(u8, 20) else r.int(u8);
        f.bits = if (r.boolean()) @as(u8, 1) << r.int(u3) else r.int(u8);
        f.lanes = if (r.boolean()) 1 else r.int(u16);
    }
    const host = [_]i32{ 1, 3, 11, 13 };
    f.device_type = if (chance(r, 85)) host[r.uintLessThan(usize, host.len)] else if (chance(r, 70))
        r.intRangeAtMost(i32, 0, 20)
    else
        r.int(i32);
    f.device_id = if (chance(r, 90))
        0
    else if (r.boolean())
        @as(i32, r.uintLessThan(u8, 8))
    else
        r.int(i32);
}

/// Shape and strides: mostly small tensors so real memory backs them; now and then a hostile
/// extent. Strides in C order, F order, a permutation or random small values, some hostile.
fn generateLayout(r: std.Random, f: *Fields) void {
    f.shape_null = chance(r, 4);
    f.strides_null = chance(r, 25);
    const rank: usize = @intCast(std.math.clamp(f.ndim, 0, rank_max));
    const hostile_shape = chance(r, 12);
    for (0..rank) |d| {
        f.shape[d] = if (hostile_shape and chance(r, 30)) hostileI64(r) else if (chance(r, 8))
            0
        else if (rank > 8 and chance(r, 70))
            1
        else
            r.intRangeAtMost(i64, 1, 5);
    }
    const pattern = r.uintLessThan(u8, 6);
    var step: i64 = 1;
    for (0..rank) |i| {
        const d = if (pattern == 1) i else rank - 1 - i;
        f.strides[d] = step;
        step = step *% @max(f.shape[d], 1);
    }
    for (0..rank) |d| {
        switch (pattern) {
            0, 1 => {},
            2 => f.strides[d] = 0 -% f.strides[d],
            3 => f.strides[d] = r.intRangeAtMost(i64, -6, 6),
            4 => if (chance(r, 30)) {
                f.strides[d] = 0;
            },
            else => if (chance(r, 25)) {
                f.strides[d] = hostileI64(r);
            },
        }
    }
}

/// One hostile trait in about one case in six.
fn generateHostile(r: std.Random, f: *Fields) void {
    f.struct_at = .real;
    f.shape_at = .real;
    f.strides_at = .real;
    f.bad_deleter = 0;
    f.mixed = false;
    if (f.null_managed or f.bad_managed != 0) return;
    const struct_places = [_]Place{ .prot_none, .unmapped, .straddle, .just_unmapped, .top };
    const array_places = [_]Place{ .prot_none, .unmapped, .straddle };
    switch (r.uintLessThan(u8, 100)) {
        0...2 => f.struct_at = struct_places[r.uintLessThan(usize, struct_places.len)],
        3...5 => f.shape_at = array_places[r.uintLessThan(usize, array_places.len)],
        6...8 => f.strides_at = array_places[r.uintLessThan(usize, array_places.len)],
        9...12 => {
            f.has_deleter = true;
            f.bad_deleter = garbageDeleter(r);
        },
        // Read as legacy, a versioned struct's deleter slot holds its shape pointer (heap).
        13...16 => f.mixed = !Guard.data_is_code,
        else => {},
    }
    // An array of one int64 placed across the page boundary would be readable after all.
    const rank: usize = @intCast(std.math.clamp(f.ndim, 0, rank_max));
    if (rank <= 1 and f.shape_at == .straddle) f.shape_at = .prot_none;
    if (rank <= 1 and f.strides_at == .straddle) f.strides_at = .prot_none;
}

var a_static_word: u64 = 0;

/// Whether /proc/self/maps lists `address` as executable (the fuzzer's own reading, independent of
/// the library's).
fn executableHere(address: usize) bool {
    return listing.executable(address);
}

/// A deleter value that is not executable code whatever this process maps: data, the stack, the
/// guard pages, the never-mapped first 64 KiB, and addresses beyond 48-bit user space.
fn garbageDeleter(r: std.Random) u64 {
    var on_stack: u64 = 0;
    const first: u8 = if (Guard.data_is_code) 2 else 0;
    return switch (r.intRangeLessThan(u8, first, 8)) {
        0 => @intFromPtr(&a_static_word),
        1 => @intFromPtr(&on_stack),
        2 => Guard.base + r.uintLessThan(usize, Guard.page),
        3 => Guard.base + Guard.page + r.uintLessThan(usize, Guard.page),
        4 => Guard.base + 2 * Guard.page + r.uintLessThan(usize, Guard.page),
        5 => r.intRangeAtMost(u64, 1, 0xffff),
        6 => r.intRangeAtMost(u64, 1 << 48, (1 << 56) - 1),
        else => r.int(u64) | 1 << 63,
    };
}

// ---------------------------------------------------------------------------------------------
// The model: which refusals apply, and what an accepted tensor looks like. Written from the rules
// in design.md and dlpack.md, in i256 so no input can overflow it.

const Model = struct {
    /// Bit per Status value; 0 means the tensor must be accepted.
    refusals: u32 = 0,
    /// A struct read as the other generation: any status (or acceptance) is possible.
    any_status: bool = false,
    /// Whether the layout could be evaluated (so data and byte_offset can be chosen to fit it).
    layout_known: bool = false,
    empty: bool = false,
    size: i256 = 0,
    slot_bits: i256 = 0,
    min: i256 = 0,
    max: i256 = 0,
    /// Byte span relative to element 0: [lo, hi).
    lo: i256 = 0,
    hi: i256 = 0,
    strides: [rank_max]i64 = undefined,
    /// Accepted read-only because its data cannot be written (READ_ONLY set in the flags too).
    data_readonly: bool = false,

    fn refuse(self: *Model, status: abi.Status) void {
        self.refusals |= @as(u32, 1) << @intCast(@intFromEnum(status));
    }

    fn allows(self: Model, status: i32) bool {
        if (status <= 0 or status >= 32) return false;
        return self.refusals & (@as(u32, 1) << @intCast(status)) != 0;
    }
};

/// Whether an array of `rank` int64s put at `place` has a byte that is not readable (one placed
/// across the page boundary has its first 8 bytes readable).
fn arrayUnreadable(where: Place, rank: usize) bool {
    return switch (where) {
        .real => false,
        .straddle => rank > 1,
        else => true,
    };
}

fn modelLayout(f: *const Fields) Model {
    var m = Model{};
    if (modelHeader(f, &m)) return m;
    if (modelArrays(f, &m)) return m;
    const rank: usize = @intCast(f.ndim);
    if (modelExtents(f, rank, &m)) return m;
    modelSpan(f, rank, &m);
    return m;
}

/// The refusals decided before any field is read, and the struct-level fields. True when the
/// model is complete.
fn modelHeader(f: *const Fields, m: *Model) bool {
    if (f.null_managed) {
        m.refuse(.null_managed);
        return true;
    }
    if (f.bad_managed != 0) {
        m.refuse(.bad_address);
        return true;
    }
    // Checked before any field is read.
    if (f.struct_at != .real) {
        m.refuse(.unmapped_struct);
        return true;
    }
    // Any status may follow from the other generation's bytes; `runCase` checks what matters.
    if (f.mixed) {
        m.any_status = true;
        return true;
    }
    if (f.bad_deleter != 0) {
        m.refuse(.bad_deleter);
        return true;
    }
    // A foreign major may lay out everything after `flags` differently.
    if (f.versioned and f.major != 1) {
        m.refuse(.version);
        return true;
    }
    if (f.versioned and f.flags & ~@as(u64, 7) != 0) m.refuse(.flags);
    if (!dtypeSupported(f.code, f.bits, f.lanes)) m.refuse(.dtype);
    if (!deviceKnown(f.device_type) or f.device_id < 0) m.refuse(.device);
    if (f.ndim < 0 or f.ndim > rank_max) {
        m.refuse(.rank);
        return true;
    }
    return false;
}

/// The shape and strides arrays: present and readable (both checked before either is read).
fn modelArrays(f: *const Fields, m: *Model) bool {
    const rank: usize = @intCast(f.ndim);
    if (rank == 0) return false;
    if (f.shape_null or arrayUnreadable(f.shape_at, rank)) {
        m.refuse(.shape);
        return true;
    }
    if (!f.strides_null and arrayUnreadable(f.strides_at, rank)) {
        m.refuse(.strides);
        return true;
    }
    return false;
}

/// The extents: none negative, the element count and every extent exact below 2^53.
fn modelExtents(f: *const Fields, rank: usize, m: *Model) bool {
    var size: i256 = 1;
    for (f.shape[0..rank]) |e| {
        if (e < 0) {
            m.refuse(.shape);
            return true;
        }
        // Saturates far above 2^53 (64 extents of 2^63 would not fit even i256); a zero still wins.
        size = if (e == 0) 0 else @min(size * e, @as(i256, 1) << 128);
        if (size == 0) break;
    }
    for (f.shape[0..rank]) |e| if (e < 0) {
        m.refuse(.shape);
        return true;
    };
    m.empty = size == 0;
    m.size = size;
    if (!m.empty and size > exact_max) {
        m.refuse(.overflow);
        return true;
    }
    // Every extent reaches JS as an exact f64, empty tensors included.
    for (f.shape[0..rank]) |e| if (e > exact_max) {
        m.refuse(.overflow);
        return true;
    };
    return false;
}

/// The strides (C order for NULL ones), the element offsets reached and the byte span.
fn modelSpan(f: *const Fields, rank: usize, m: *Model) void {
    if (f.strides_null) {
        var step: i256 = 1;
        var d = rank;
        while (d > 0) {
            d -= 1;
            m.strides[d] = @intCast(
                std.math.clamp(step, std.math.minInt(i64), std.math.maxInt(i64)),
            );
            step = @min(step * f.shape[d], @as(i256, 1) << 128);
        }
    } else @memcpy(m.strides[0..rank], f.strides[0..rank]);
    for (0..rank) |d| {
        if (m.empty) break;
        const reach = @as(i256, f.shape[d] - 1) * m.strides[d];
        if (reach < 0) m.min += reach else m.max += reach;
    }
    const padded = f.versioned and f.flags & abi.flag_subbyte_padded != 0;
    m.slot_bits = if (f.bits < 8 and padded) 8 else f.bits;
    m.lo = @divFloor(m.min * m.slot_bits, 8);
    m.hi = @divFloor((m.max + 1) * m.slot_bits + 7, 8);
    if (!m.empty and (m.hi - m.lo > exact_max or -m.lo > exact_max or m.hi > exact_max or
        -m.min > exact_max or m.max > exact_max))
    {
        m.refuse(.overflow);
        return;
    }
    m.layout_known = true;
}

/// The checks that depend on where the data is: the address, then (last, once everything else
/// holds) the data range of host memory.
fn modelPlacement(f: *const Fields, m: *Model) void {
    if (!m.layout_known) return;
    if (f.data == 0 and m.size != 0) m.refuse(.null_data);
    if (f.strict and f.byte_offset != 0) m.refuse(.byte_offset);
    const address = @as(i256, f.data) + f.byte_offset;
    if (address > u64_max) {
        m.refuse(.overflow);
        return;
    }
    if (!m.empty and (address + m.lo < 0 or address + m.hi > u64_max)) m.refuse(.overflow);
    if (m.refusals != 0 or m.empty or !hostDevice(f.device_type)) return;
    const first: u64 = @intCast(address + m.lo);
    const end: u64 = @intCast(address + m.hi);
    switch (dataAccess(f, first, end)) {
        .none => m.refuse(.unmapped_data),
        .read => m.data_readonly = true,
        .read_write => {},
    }
}

/// Whether the CPU reads a device type's memory directly (the validator checks its data range).
fn hostDevice(device_type: i32) bool {
    return device_type == 1 or device_type == 3 or device_type == 11 or device_type == 13;
}

/// What the data range [first, end) allows: known for allocations and the guard's pages, else
/// read from /proc/self/maps.
fn dataAccess(f: *const Fields, first: u64, end: u64) DataAccess {
    if (f.allocated) return .read_write;
    const page = Guard.page;
    const rw = Guard.data_base;
    return switch (f.data_at) {
        .listed, .top => listedAccess(first, end),
        .prot_none, .unmapped, .into_prot_none, .low, .beyond => .none,
        .read_only, .into_read_only => if (first >= rw and end <= rw + 2 * page) .read else .none,
    };
}

/// The fuzzer's own reading of /proc/self/maps, independent of the library's: the permissions
/// every byte of [first, end) has.
fn listedAccess(first: u64, end: u64) DataAccess {
    return listing.access(first, end) orelse .none;
}

fn fakeAddress(r: std.Random) usize {
    return switch (r.uintLessThan(u8, 6)) {
        0 => 0x1000,
        1 => r.intRangeAtMost(usize, 0x10000, 1 << 47),
        2 => (1 << 53) - 64,
        3 => std.math.maxInt(usize) - r.uintLessThan(usize, 4096),
        4 => (1 << 63) + r.uintLessThan(usize, 1 << 20),
        else => r.int(usize),
    };
}

/// Decides data and byte_offset: real memory exactly covering the span for honest tensors, NULL or
/// a fake address (never dereferenced) otherwise.
fn place(r: std.Random, f: *Fields, m: *const Model) !void {
    f.allocated = false;
    f.byte_offset = 0;
    f.data_at = .listed;
    f.span_base = 0;
    f.span_len = 0;
    if (m.layout_known and !m.empty and m.hi - m.lo <= alloc_bytes_max and chance(r, 85)) {
        const len: usize = @intCast(m.hi - m.lo);
        const base = try mallocExact(len);
        // Non-zero contents, so the element reads below are not reading freshly mapped zeros only.
        @memset(base[0..len], 0x5a);
        const element0: usize = @intFromPtr(base) + @as(usize, @intCast(-m.lo));
        // Element 0 = data + byte_offset; split it several ways (data may precede the allocation).
        const room = element0 - @intFromPtr(base);
        f.byte_offset = if (f.strict and chance(r, 90)) 0 else switch (r.uintLessThan(u8, 4)) {
            0 => 0,
            1 => room,
            2 => if (room == 0) 0 else r.uintAtMost(usize, room),
            else => r.uintAtMost(usize, room + 256),
        };
        f.data = element0 - f.byte_offset;
        f.data_len = len;
        f.alloc_base = @intFromPtr(base);
        f.allocated = true;
        f.span_base = f.alloc_base;
        f.span_len = len;
        return;
    }
    if (m.layout_known and m.empty and chance(r, 50)) {
        f.data = if (r.boolean()) 0 else fakeAddress(r);
        return;
    }
    if (m.layout_known and !m.empty and hostDevice(f.device_type) and chance(r, 60)) {
        placeData(r, f, m);
        return;
    }
    f.data = if (chance(r, 20)) 0 else fakeAddress(r);
    if (chance(r, 35)) f.byte_offset = switch (r.uintLessThan(u8, 4)) {
        0 => r.uintLessThan(u64, 4096),
        1 => std.math.maxInt(u64),
        2 => 1 << 63,
        else => r.int(u64),
    };
}

/// Puts the data range of a host tensor (which no allocation backs) in a hostile place: its first
/// byte where the place says, element 0 (and data, with a byte offset) where that makes it.
fn placeData(r: std.Random, f: *Fields, m: *const Model) void {
    const places = [_]DataPlace{
        .prot_none, .unmapped, .into_prot_none, .read_only, .into_read_only, .low, .top, .beyond,
    };
    f.data_at = places[r.uintLessThan(usize, places.len)];
    const span: u64 = @intCast(m.hi - m.lo);
    const page = Guard.page;
    const rw = Guard.data_base;
    // How far a range that runs from one page into the next starts before the boundary.
    const into: u64 = if (span < 2) 0 else r.intRangeAtMost(u64, 1, @as(u64, @min(span - 1, page)));
    const first: u64 = switch (f.data_at) {
        .listed => unreachable,
        .prot_none => rw + 2 * page + r.uintLessThan(u64, page / 2),
        .unmapped => Guard.base + 2 * page + r.uintLessThan(u64, page / 2),
        .into_prot_none => rw + 2 * page - into,
        .read_only => rw + page + if (span < page) r.uintAtMost(u64, page - span) else 0,
        .into_read_only => rw + page - into,
        .low => r.intRangeAtMost(u64, 1, 4095),
        .top => (1 << 47) - @max(into, 1),
        .beyond => r.intRangeAtMost(u64, 1 << 48, (1 << 53) - @as(u64, @min(span, 1 << 52))),
    };
    const element0 = first + @as(u64, @intCast(-m.lo));
    f.byte_offset = if (f.strict or r.boolean()) 0 else r.uintAtMost(u64, element0 - 1);
    f.data = element0 - f.byte_offset;
    if (dataAccess(f, first, first + span) != .none) {
        f.span_base = first;
        f.span_len = span;
    }
}

/// Builds the managed struct and its arrays (each exactly as long as `ndim` says).
fn build(f: *const Fields) !*Produced {
    const p: *Produced = @ptrCast(@alignCast(try mallocExact(@sizeOf(Produced))));
    p.* = .{
        .versioned = f.versioned,
        .managed = 0,
        .shape = null,
        .strides = null,
        .data = if (f.allocated) @ptrFromInt(f.alloc_base) else null,
        .data_len = f.data_len,
        .has_deleter = f.has_deleter,
    };
    errdefer p.free();
    // Arrays hold exactly ndim entries (one spare-free byte for ndim 0, two for a refused rank).
    const entries: usize = if (f.ndim >= 0 and f.ndim <= rank_max) @intCast(f.ndim) else 2;
    const rank: usize = @min(entries, rank_max);
    if (!f.shape_null) {
        const s: [*]i64 = @ptrCast(@alignCast(try mallocExact(entries * 8)));
        for (0..rank) |d| s[d] = f.shape[d];
        p.shape = s;
    }
    if (!f.strides_null) {
        const s: [*]i64 = @ptrCast(@alignCast(try mallocExact(entries * 8)));
        for (0..rank) |d| s[d] = f.strides[d];
        p.strides = s;
    }
    // Arrays in hostile places: the struct points there, the real ones are still freed with it.
    const shape_address = try arrayAddress(@intFromPtr(p.shape), f.shape_at, entries);
    const strides_address = try arrayAddress(@intFromPtr(p.strides), f.strides_at, entries);
    const tensor = abi.Tensor{
        .data = f.data,
        .device_type = f.device_type,
        .device_id = f.device_id,
        .ndim = f.ndim,
        .code = f.code,
        .bits = f.bits,
        .lanes = f.lanes,
        .shape = shape_address,
        .strides = strides_address,
        .byte_offset = f.byte_offset,
    };
    p.managed = try buildStruct(f, p, tensor);
    if (f.bad_deleter != 0) {
        const versioned_slot = @offsetOf(abi.Versioned, "deleter");
        const slot: usize = if (f.versioned) versioned_slot else @offsetOf(abi.Legacy, "deleter");
        @as(*u64, @ptrFromInt(p.managed + slot)).* = f.bad_deleter;
    }
    return p;
}

/// Where a struct points for an array: the real one, or a hostile place.
fn arrayAddress(real: usize, where: Place, entries: usize) error{OutOfMemory}!usize {
    if (real == 0 or where == .real) return real;
    return Guard.address(where, entries * 8);
}

/// The managed struct of either generation, its deleter freeing `p`.
fn buildStruct(f: *const Fields, p: *Produced, tensor: abi.Tensor) error{OutOfMemory}!usize {
    if (f.versioned) {
        const m: *abi.Versioned = @ptrCast(@alignCast(try mallocExact(@sizeOf(abi.Versioned))));
        m.* = .{
            .major = f.major,
            .minor = f.minor,
            .manager_ctx = @intFromPtr(p),
            .deleter = if (f.has_deleter) versionedDeleter else null,
            .flags = f.flags,
            .dl_tensor = tensor,
        };
        return @intFromPtr(m);
    }
    // Read as versioned, a legacy struct is 16 bytes short: those bytes exist (zeros), so that
    // reading them is not an out-of-bounds read valgrind would rightly report.
    const bytes: usize = if (f.mixed) @sizeOf(abi.Versioned) else @sizeOf(abi.Legacy);
    const raw = try mallocExact(bytes);
    @memset(raw[0..bytes], 0);
    const m: *abi.Legacy = @ptrCast(@alignCast(raw));
    m.* = .{
        .dl_tensor = tensor,
        .manager_ctx = @intFromPtr(p),
        .deleter = if (f.has_deleter) legacyDeleter else null,
    };
    return @intFromPtr(m);
}

// ---------------------------------------------------------------------------------------------
// One case

pub const Tally = struct {
    cases: u64 = 0,
    accepted_in_memory: u64 = 0,
    accepted_fake_address: u64 = 0,
    accepted_empty: u64 = 0,
    /// Accepted over hostile data places that are readable (read-only memory), and read.
    accepted_read_only: u64 = 0,
    hostile_data: u64 = 0,
    refused: [32]u64 = [_]u64{0} ** 32,
    round_trips: u64 = 0,
    hostile_struct: u64 = 0,
    hostile_arrays: u64 = 0,
    hostile_deleter: u64 = 0,
    mixed: u64 = 0,
    own_mixed: u64 = 0,
    own_twice: u64 = 0,
    elements_checked: u64 = 0,
    checksum: u64 = 0,
};

const Failure = error{ Mismatch, OutOfMemory };

var failure_note: [512]u8 = undefined;
var failure_len: usize = 0;

fn fail(comptime fmt: []const u8, args: anytype) Failure {
    const text = std.fmt.bufPrint(&failure_note, fmt, args) catch failure_note[0..0];
    failure_len = text.len;
    return error.Mismatch;
}

pub fn failureNote() []const u8 {
    return failure_note[0..failure_len];
}

fn exactF(value: i256) ?f64 {
    if (value > exact_max or value < -exact_max) return null;
    return @floatFromInt(@as(i64, @intCast(value)));
}

fn layoutBits(f: *const Fields, m: *const Model) u32 {
    if (m.empty) return 3;
    const rank: usize = @intCast(f.ndim);
    var c = true;
    var fo = true;
    for (0..rank) |d| {
        if (f.shape[d] == 1) continue;
        var after: i256 = 1;
        for (d + 1..rank) |e| after *= f.shape[e];
        var before: i256 = 1;
        for (0..d) |e| before *= f.shape[e];
        if (m.strides[d] != after) c = false;
        if (m.strides[d] != before) fo = false;
    }
    return @as(u32, @intFromBool(c)) | @as(u32, @intFromBool(fo)) << 1;
}

fn checkDescription(f: *const Fields, m: *const Model, d: *const abi.Description) Failure!void {
    const rank: usize = @intCast(f.ndim);
    const address: u64 = f.data +% f.byte_offset;
    if (d.address() != address) {
        return fail("address 0x{x}, expected 0x{x}", .{ d.address(), address });
    }
    if (d.ndim != f.ndim) return fail("ndim {d}, expected {d}", .{ d.ndim, f.ndim });
    if (d.code != f.code or d.bits != f.bits or d.lanes != 1) {
        return fail("dtype {d}/{d}", .{ d.code, d.bits });
    }
    if (d.device_type != f.device_type or d.device_id != f.device_id) return fail("device", .{});
    if (f.versioned) {
        if (d.version_major != 1 or d.version_minor != @as(
            i32,
            @intCast(@min(f.minor, std.math.maxInt(i32))),
        ))
            return fail("version {d}.{d}", .{ d.version_major, d.version_minor });
    } else if (d.version_major != -1) return fail("legacy version", .{});
    // Data this process cannot write makes the import read-only, whatever the producer said.
    const read_only: u64 = if (m.data_readonly) abi.flag_read_only else 0;
    const flags = (if (f.versioned) f.flags else 0) | read_only;
    if (d.flags != flags) return fail("flags {d}, expected {d}", .{ d.flags, flags });
    if (d.size != exactF(m.size).?) return fail("size {d}, expected {d}", .{ d.size, m.size });
    const nbytes = @divFloor(m.size * m.slot_bits + 7, 8);
    // nbytes may pass 2^53 for broadcasts (size times the item size), but must still be exact.
    const nbytes_f: f64 = @floatFromInt(nbytes);
    if (@as(i256, @intFromFloat(nbytes_f)) != nbytes or d.nbytes != nbytes_f) {
        return fail("nbytes {d}, expected {d}", .{ d.nbytes, nbytes });
    }
    if (d.byte_offset != @as(f64, @floatFromInt(f.byte_offset))) return fail("byte_offset", .{});
    if (!m.empty) {
        const min = exactF(m.min) orelse return fail(
            "min offset {d} beyond 2^53 accepted",
            .{m.min},
        );
        const max = exactF(m.max) orelse return fail(
            "max offset {d} beyond 2^53 accepted",
            .{m.max},
        );
        if (d.min_offset != min or d.max_offset != max)
            return fail(
                "offsets {d}..{d}, expected {d}..{d}",
                .{ d.min_offset, d.max_offset, min, max },
            );
    }
    for (0..rank) |i| {
        if (d.shape[i] != @as(f64, @floatFromInt(f.shape[i]))) return fail("shape[{d}]", .{i});
        const s = std.math.clamp(m.strides[i], -@as(i64, 1 << 53), @as(i64, 1 << 53));
        if (d.strides[i] != @as(f64, @floatFromInt(s))) {
            return fail("strides[{d}] {d}, expected {d}", .{ i, d.strides[i], s });
        }
    }
    // The device claim was verified: CPU memory always is; with no CUDA driver here (this harness
    // never loads one), nothing else is.
    const verified: u32 = if (f.device_type == 1) abi.layout_device_verified else 0;
    const readonly: u32 = if (m.data_readonly) abi.layout_data_readonly else 0;
    const layout = layoutBits(f, m) | verified | readonly;
    if (d.layout != layout) return fail("layout {d}, expected {d}", .{ d.layout, layout });
}

/// Checks and reads the bytes of element `offset` (in elements from element 0), using only what the
/// description says, against the allocation [base, base + len).
fn touchElement(
    d: *const abi.Description,
    slot_bits: i64,
    offset: i64,
    base: usize,
    len: usize,
    tally: *Tally,
) Failure!void {
    const element0: i128 = d.address();
    const bit = @as(i128, offset) * slot_bits;
    const first = element0 + @divFloor(bit, 8);
    const end = element0 + @divFloor(bit + slot_bits + 7, 8);
    if (first < base or end > base + len) {
        return fail(
            "element at offset {d} covers [0x{x}, 0x{x}), outside the allocation [0x{x}, 0x{x})",
            .{ offset, first, end, base, base + len },
        );
    }
    var a: usize = @intCast(first);
    while (a < end) : (a += 1) tally.checksum +%= @as(*const volatile u8, @ptrFromInt(a)).*;
    tally.elements_checked += 1;
}

fn checkMemory(
    r: std.Random,
    f: *const Fields,
    m: *const Model,
    d: *const abi.Description,
    tally: *Tally,
) Failure!void {
    const rank: usize = @intCast(f.ndim);
    const base = f.span_base;
    const slot: i64 = @intCast(m.slot_bits);
    var shape: [rank_max]i64 = undefined;
    var strides: [rank_max]i64 = undefined;
    for (0..rank) |i| {
        shape[i] = @intFromFloat(d.shape[i]);
        strides[i] = @intFromFloat(d.strides[i]);
    }
    const size: u64 = @intFromFloat(d.size);
    if (size <= full_check_elements_max) {
        // Every element, by an odometer over the index; the extremes must be the reported ones.
        var index = [_]i64{0} ** rank_max;
        var lo: i64 = 0;
        var hi: i64 = 0;
        var k: u64 = 0;
        while (k < size) : (k += 1) {
            var offset: i64 = 0;
            for (0..rank) |i| offset += index[i] * strides[i];
            lo = @min(lo, offset);
            hi = @max(hi, offset);
            try touchElement(d, slot, offset, base, f.span_len, tally);
            var i = rank;
            while (i > 0) {
                i -= 1;
                index[i] += 1;
                if (index[i] < shape[i]) break;
                index[i] = 0;
            }
        }
        const lo_f: f64 = @floatFromInt(lo);
        const hi_f: f64 = @floatFromInt(hi);
        if (lo_f != d.min_offset or hi_f != d.max_offset) {
            return fail(
                "elements reach {d}..{d}, description says {d}..{d}",
                .{ lo, hi, d.min_offset, d.max_offset },
            );
        }
        return;
    }
    try touchElement(d, slot, @intFromFloat(d.min_offset), base, f.span_len, tally);
    try touchElement(d, slot, @intFromFloat(d.max_offset), base, f.span_len, tally);
    for (0..full_check_elements_max) |_| {
        var offset: i64 = 0;
        for (0..rank) |i| offset += @as(
            i64,
            @intCast(r.uintLessThan(u64, @intCast(shape[i]))),
        ) * strides[i];
        try touchElement(d, slot, offset, base, f.span_len, tally);
    }
}

/// Exports the accepted tensor again and imports that export: same memory, same layout. Now and
/// then the export is first imported as the wrong generation, or imported twice.
fn roundTrip(r: std.Random, f: *const Fields, d: *abi.Description, tally: *Tally) Failure!void {
    var spec = d.*;
    const padded = f.flags & abi.flag_subbyte_padded != 0 and f.versioned;
    const versioned = padded or r.boolean();
    const exported_status = abi.dlpk_export(
        if (versioned) abi.export_versioned else 0,
        @intFromPtr(&spec),
    );
    if (exported_status != 0) return fail("re-export refused with status {d}", .{exported_status});
    const exported = spec.address();
    if (chance(r, 25)) return wrongGeneration(r, exported, versioned, tally);
    var again: abi.Description = undefined;
    const status = abi.dlpk_import(
        exported,
        if (versioned) abi.import_versioned else 0,
        @intFromPtr(&again),
    );
    if (status != 0) return fail("re-import of our own export refused with {d}", .{status});
    const same_span = again.min_offset == d.min_offset and again.max_offset == d.max_offset;
    if (again.address() != d.address() or again.ndim != d.ndim or again.size != d.size or
        (again.size != 0 and !same_span))
        return fail("re-import describes other memory", .{});
    for (0..@intCast(d.ndim)) |i| {
        if (again.shape[i] != d.shape[i] or again.strides[i] != d.strides[i]) {
            return fail("re-import layout", .{});
        }
    }
    if (again.owner() == d.owner()) return fail("re-import shares the owner record", .{});
    const twice = chance(r, 30);
    if (twice) {
        // One export, one import: the second is refused whatever generation it claims.
        try expectOwnRefusal(
            exported,
            r.boolean(),
            .already_imported,
            "a second import of one export",
        );
        tally.own_twice += 1;
    }
    // Release the outer import first or last: the producer must wait for both.
    if (r.boolean()) {
        abi.dlpk_owner_release(again.owner());
    } else {
        abi.dlpk_owner_retain(d.owner());
        abi.dlpk_owner_release(again.owner());
        abi.dlpk_owner_release(d.owner());
    }
    // Released (and still in quarantine): the stale address is refused, nothing is freed twice.
    if (twice) try expectOwnRefusal(
        exported,
        r.boolean(),
        .released_export,
        "an import of a released export",
    );
}

/// This library's export imported as the other generation: refused, and released once through
/// its real deleter (unless the caller keeps refused tensors; then it is released here).
fn wrongGeneration(r: std.Random, exported: usize, versioned: bool, tally: *Tally) Failure!void {
    const keep = chance(r, 20);
    const exports_before = abi.stat(.exports);
    var options: u32 = if (versioned) 0 else abi.import_versioned;
    if (keep) options |= abi.import_keep_on_refusal;
    var d: abi.Description = undefined;
    const status = abi.dlpk_import(exported, options, @intFromPtr(&d));
    if (status != @intFromEnum(abi.Status.generation)) {
        if (status == 0) abi.dlpk_owner_release(d.owner());
        return fail(
            "our export of the other generation: status {d}, expected generation",
            .{status},
        );
    }
    if (d.detail_limit != @intFromBool(versioned)) {
        return fail("generation refusal names the wrong one", .{});
    }
    const released: i64 = if (keep) 0 else 1;
    if (abi.stat(.exports) != exports_before - released) {
        return fail("the refused export was not released once", .{});
    }
    if (keep) abi.dlpk_managed_delete(exported, @intFromBool(versioned));
    if (abi.stat(.exports) != exports_before - 1) {
        return fail("the kept export was not released by its deleter", .{});
    }
    try expectOwnRefusal(exported, r.boolean(), .released_export, "an import of a released export");
    tally.own_mixed += 1;
}

fn expectOwnRefusal(
    exported: usize,
    versioned: bool,
    expected: abi.Status,
    what: []const u8,
) Failure!void {
    const exports_before = abi.stat(.exports);
    var d: abi.Description = undefined;
    const status = abi.dlpk_import(
        exported,
        if (versioned) abi.import_versioned else 0,
        @intFromPtr(&d),
    );
    if (status == 0) abi.dlpk_owner_release(d.owner());
    if (status != @intFromEnum(expected)) {
        return fail("{s}: status {d}, expected {d}", .{ what, status, @intFromEnum(expected) });
    }
    if (abi.stat(.exports) != exports_before) return fail("{s} released something", .{what});
}

/// The fields of the case running now, printed when it fails.
var current: Fields = undefined;

fn printFields(f: *const Fields) void {
    const rank: usize = @intCast(std.math.clamp(f.ndim, 0, rank_max));
    std.debug.print("  fields: versioned {} major {d} minor {d} flags 0x{x} ndim {d} " ++
        "dtype {d}/{d}/{d} device {d}:{d}\n", .{
        f.versioned, f.major, f.minor, f.flags,       f.ndim,
        f.code,      f.bits,  f.lanes, f.device_type, f.device_id,
    });
    std.debug.print("          shape {any}{s} strides {any}{s}\n", .{
        f.shape[0..rank],   if (f.shape_null) " (NULL)" else "",
        f.strides[0..rank], if (f.strides_null) " (NULL)" else "",
    });
    std.debug.print("          data 0x{x} byte_offset {d} allocated {} ({d} bytes) strict {} " ++
        "keep {} deleter {} null_managed {} bad_managed 0x{x}\n", .{
        f.data, f.byte_offset, f.allocated,    f.data_len,    f.strict,
        f.keep, f.has_deleter, f.null_managed, f.bad_managed,
    });
    std.debug.print("          struct {s} shape {s} strides {s} bad deleter 0x{x} mixed {} " ++
        "data {s}\n", .{
        @tagName(f.struct_at), @tagName(f.shape_at), @tagName(f.strides_at), f.bad_deleter, f.mixed,
        @tagName(f.data_at),
    });
}

/// Whether the validator may call the producer's deleter: a struct it can read, with a deleter
/// that is code, read as the generation it is.
fn callable(f: *const Fields) bool {
    return f.has_deleter and f.bad_deleter == 0 and f.struct_at == .real and
        f.bad_managed == 0 and !f.mixed;
}

/// The address handed to the import: the struct's, or a hostile one.
fn passedAddress(f: *const Fields, produced: ?*Produced) Failure!usize {
    const p = produced orelse return 0;
    if (f.bad_managed != 0) {
        return if (f.bad_managed < 8) p.managed + f.bad_managed else f.bad_managed;
    }
    if (f.struct_at == .real) return p.managed;
    const versioned_size = @sizeOf(abi.Versioned);
    const claimed_size: usize = if (f.versioned != f.mixed) versioned_size else @sizeOf(abi.Legacy);
    return Guard.address(f.struct_at, claimed_size) catch fail(
        "could not map a page to unmap",
        .{},
    );
}

pub fn runCase(r: std.Random, tally: *Tally) Failure!void {
    Guard.init() catch return fail("could not map the guard pages at 0x{x}", .{Guard.base});
    var f = generate(r);
    current = f;
    var m = modelLayout(&f);
    try place(r, &f, &m);
    modelPlacement(&f, &m);
    current = f;
    var produced: ?*Produced = null;
    if (!f.null_managed) {
        produced = try build(&f);
    } else if (f.allocated) std.c.free(@ptrFromInt(f.alloc_base));
    const managed = try passedAddress(&f, produced);
    const imports_before = abi.stat(.imports);
    const exports_before = abi.stat(.exports);
    const calls_before = deleter_calls;
    var options: u32 = if (f.versioned != f.mixed) abi.import_versioned else 0;
    if (f.strict) options |= abi.import_strict_offset;
    if (f.keep) options |= abi.import_keep_on_refusal;
    var d: abi.Description = undefined;
    const status = abi.dlpk_import(managed, options, @intFromPtr(&d));
    tally.cases += 1;
    tallyHostile(&f, tally);
    if (m.any_status) {
        try checkMixed(status, &d, calls_before, produced.?, tally);
    } else if (m.refusals != 0) {
        try checkRefused(&f, &m, status, &d, calls_before, produced, managed, tally);
    } else {
        try checkAccepted(r, &f, &m, status, &d, calls_before, imports_before, produced, tally);
    }
    if (abi.stat(.imports) != imports_before or abi.stat(.exports) != exports_before) {
        return fail(
            "live counters did not return (imports {d} -> {d}, exports {d} -> {d})",
            .{ imports_before, abi.stat(.imports), exports_before, abi.stat(.exports) },
        );
    }
}

fn tallyHostile(f: *const Fields, tally: *Tally) void {
    if (f.struct_at != .real) tally.hostile_struct += 1;
    if (f.shape_at != .real or f.strides_at != .real) tally.hostile_arrays += 1;
    if (f.bad_deleter != 0) tally.hostile_deleter += 1;
    if (f.data_at != .listed) tally.hostile_data += 1;
}

/// A struct read as the other generation: whatever the status, no deleter may run (its deleter
/// slot holds a pointer into its arrays, or ndim and dtype: never code).
fn checkMixed(
    status: i32,
    d: *const abi.Description,
    calls_before: u32,
    p: *Produced,
    tally: *Tally,
) Failure!void {
    if (status == 0) abi.dlpk_owner_release(d.owner());
    defer p.free();
    if (deleter_calls != calls_before) {
        return fail("a struct of the other generation ran a deleter", .{});
    }
    if (status != 0 and d.status != status) {
        return fail("description status {d} differs from returned {d}", .{ d.status, status });
    }
    tally.mixed += 1;
    tally.refused[@intCast(std.math.clamp(status, 0, 31))] += 1;
}

fn checkRefused(
    f: *const Fields,
    m: *const Model,
    status: i32,
    d: *const abi.Description,
    calls_before: u32,
    produced: ?*Produced,
    managed: usize,
    tally: *Tally,
) Failure!void {
    // The producer's deleter runs on refusal unless the caller kept the tensor or it cannot be
    // called.
    const expect_deleted: u32 = if (!f.keep and callable(f) and managed != 0) 1 else 0;
    if (status == 0) {
        abi.dlpk_owner_release(d.owner());
        if (produced != null and !f.has_deleter) produced.?.free();
        return fail("accepted a tensor the model refuses (refusal bits 0x{x})", .{m.refusals});
    }
    if (!m.allows(status)) {
        return fail("refused with status {d}, model allows bits 0x{x}", .{ status, m.refusals });
    }
    if (d.status != status) {
        return fail("description status {d} differs from returned {d}", .{ d.status, status });
    }
    if (deleter_calls - calls_before != expect_deleted) {
        return fail(
            "refusal ran the deleter {d} times, expected {d}",
            .{ deleter_calls - calls_before, expect_deleted },
        );
    }
    tally.refused[@intCast(@min(status, 31))] += 1;
    // Kept, deleter-less, never-found or uncallable tensors are still ours to free.
    if (produced) |p| {
        if (!callable(f)) p.free() else if (f.keep) abi.consume(p.managed, f.versioned);
    }
}

fn checkAccepted(
    r: std.Random,
    f: *const Fields,
    m: *const Model,
    status: i32,
    d: *abi.Description,
    calls_before: u32,
    imports_before: i64,
    produced: ?*Produced,
    tally: *Tally,
) Failure!void {
    if (status != 0) {
        if (produced) |p| if (!f.has_deleter or f.keep) p.free();
        return fail("refused with status {d} a tensor the model accepts", .{status});
    }
    if (deleter_calls != calls_before) return fail("accepting ran the deleter", .{});
    if (abi.stat(.imports) != imports_before + 1) return fail("imports counter did not go up", .{});
    errdefer {
        abi.dlpk_owner_release(d.owner());
        if (!f.has_deleter) produced.?.free();
    }
    try checkDescription(f, m, d);
    if (m.empty) tally.accepted_empty += 1 else if (f.span_len > 0) {
        if (f.allocated) tally.accepted_in_memory += 1 else tally.accepted_read_only += 1;
        try checkMemory(r, f, m, d, tally);
    } else tally.accepted_fake_address += 1;
    if (chance(r, 12)) {
        try roundTrip(r, f, d, tally);
        tally.round_trips += 1;
        if (deleter_calls != calls_before) {
            return fail("the deleter ran while the first import was alive", .{});
        }
    }
    abi.dlpk_owner_release(d.owner());
    const expected: u32 = if (f.has_deleter) 1 else 0;
    if (deleter_calls - calls_before != expected) {
        return fail(
            "release ran the deleter {d} times, expected {d}",
            .{ deleter_calls - calls_before, expected },
        );
    }
    if (!f.has_deleter) produced.?.free();
}

/// A `std.Random` whose bytes come from a fuzzer's input, so the fuzzer steers every choice of
/// the generator. Past the input's end it continues with a PRNG seeded from the input: a constant
/// stream would make the generator's rejection sampling (uintLessThan) retry forever.
const ByteSource = struct {
    bytes: []const u8,
    at: usize = 0,
    tail: std.Random.DefaultPrng,

    fn init(bytes: []const u8) ByteSource {
        return .{
            .bytes = bytes,
            .tail = std.Random.DefaultPrng.init(std.hash.Wyhash.hash(0, bytes)),
        };
    }

    fn fill(self: *ByteSource, buf: []u8) void {
        for (buf) |*b| {
            if (self.at < self.bytes.len) {
                b.* = self.bytes[self.at];
                self.at += 1;
            } else b.* = self.tail.random().int(u8);
        }
    }

    fn random(self: *ByteSource) std.Random {
        return std.Random.init(self, fill);
    }
};

/// The per-case generator of a seeded run: case `k` of seed `s` is reproducible on its own.
fn casePrng(seed: u64, k: u64) std.Random.DefaultPrng {
    return std.Random.DefaultPrng.init(seed ^ (k *% 0x9E3779B97F4A7C15));
}

// ---------------------------------------------------------------------------------------------
// Drivers

fn printTally(t: *const Tally, seed: u64, seconds: f64) void {
    const r = &t.refused;
    std.debug.print("fuzz: {d} cases (seed {d}) in {d:.1} s: accepted {d} in real memory, " ++
        "{d} in read-only memory, {d} at fake addresses, {d} empty; {d} re-exported; " ++
        "{d} elements checked; ", .{
        t.cases,              seed,                    seconds,          t.accepted_in_memory,
        t.accepted_read_only, t.accepted_fake_address, t.accepted_empty, t.round_trips,
        t.elements_checked,
    });
    std.debug.print("refused: version {d}, flags {d}, rank {d}, dtype {d}, device {d}, " ++
        "shape {d}, strides {d}, overflow {d}, null_data {d}, byte_offset {d}, " ++
        "null_managed {d}, bad_address {d}, unmapped_struct {d}, bad_deleter {d}, " ++
        "unmapped_data {d}; ", .{
        r[2],  r[3], r[4],  r[5], r[6],  r[7],  r[13],
        r[8],  r[9], r[10], r[1], r[17], r[20], r[21],
        r[25],
    });
    std.debug.print("hostile: {d} structs, {d} arrays, {d} deleters, {d} data ranges, {d} of " ++
        "the other generation; own exports: {d} as the other generation, {d} imported twice; " ++
        "0 failures\n", .{
        t.hostile_struct, t.hostile_arrays, t.hostile_deleter, t.hostile_data, t.mixed,
        t.own_mixed,      t.own_twice,
    });
}

/// `reliability fuzz [--seed N|random] [--cases N | --seconds S] [--case K]`
pub fn run(args: *std.process.ArgIterator) !void {
    var seed: u64 = 1;
    var cases: u64 = 100_000;
    var seconds: f64 = 0;
    var only: ?u64 = null;
    while (args.next()) |arg| {
        const value = args.next() orelse return usage();
        if (std.mem.eql(u8, arg, "--seed")) {
            seed = if (std.mem.eql(u8, value, "random")) @bitCast(
                std.time.milliTimestamp(),
            ) else try std.fmt.parseInt(u64, value, 10);
        } else if (std.mem.eql(u8, arg, "--cases")) {
            cases = try std.fmt.parseInt(u64, value, 10);
        } else if (std.mem.eql(u8, arg, "--seconds")) {
            seconds = try std.fmt.parseFloat(f64, value);
            cases = std.math.maxInt(u64);
        } else if (std.mem.eql(u8, arg, "--case")) {
            only = try std.fmt.parseInt(u64, value, 10);
        } else return usage();
    }
    if (abi.dlpk_description_size() != @sizeOf(abi.Description)) {
        std.debug.print(
            "fuzz: the library's Description is {d} bytes, this harness reads {d}\n",
            .{ abi.dlpk_description_size(), @sizeOf(abi.Description) },
        );
        std.process.exit(2);
    }
    var tally = Tally{};
    var timer = try std.time.Timer.start();
    var k: u64 = only orelse 0;
    const last = if (only) |o| o + 1 else cases;
    while (k < last) : (k += 1) {
        if (seconds > 0 and k % 1024 == 0 and @as(
            f64,
            @floatFromInt(timer.read()),
        ) / 1e9 >= seconds) break;
        var prng = casePrng(seed, k);
        runCase(prng.random(), &tally) catch |e| {
            std.debug.print(
                "fuzz: FAILED at case {d} of seed {d}: {s}: {s}\n",
                .{ k, seed, @errorName(e), failureNote() },
            );
            printFields(&current);
            std.debug.print("  replay: zig build fuzz -- --seed {d} --case {d}\n", .{ seed, k });
            std.process.exit(1);
        };
    }
    printTally(&tally, seed, @as(f64, @floatFromInt(timer.read())) / 1e9);
}

fn usage() error{InvalidArguments} {
    std.debug.print(
        "usage: zig build fuzz -- [--seed N|random] [--cases N | --seconds S] [--case K]\n",
        .{},
    );
    return error.InvalidArguments;
}

// libFuzzer entry points (tools/fuzz.sh links this file's static build with clang's libFuzzer).
// Zig's -ffuzz instrumentation emits inline 8-bit counters without registering them; libFuzzer
// learns where they are from the section bounds the linker provides.
extern fn __sanitizer_cov_8bit_counters_init(start: [*]u8, stop: [*]u8) void;
extern const __start___sancov_cntrs: u8;
extern const __stop___sancov_cntrs: u8;

fn llvmInitialize(argc: *c_int, argv: *[*][*:0]u8) callconv(.c) c_int {
    _ = argc;
    _ = argv;
    __sanitizer_cov_8bit_counters_init(
        @ptrCast(@constCast(&__start___sancov_cntrs)),
        @ptrCast(@constCast(&__stop___sancov_cntrs)),
    );
    return 0;
}

fn llvmTestOneInput(data: [*]const u8, size: usize) callconv(.c) c_int {
    var source = ByteSource.init(data[0..size]);
    var tally = Tally{};
    runCase(source.random(), &tally) catch |e| {
        std.debug.print("fuzz: {s}: {s}\n", .{ @errorName(e), failureNote() });
        printFields(&current);
        @panic("fuzz property violated");
    };
    return 0;
}

comptime {
    if (builtin.fuzz) {
        @export(&llvmInitialize, .{ .name = "LLVMFuzzerInitialize" });
        @export(&llvmTestOneInput, .{ .name = "LLVMFuzzerTestOneInput" });
    }
}

// ---------------------------------------------------------------------------------------------
// Unit tests: a short seeded run, and the byte-driven generator on a few fixed inputs.

test "seeded validator fuzz: 3,000 cases" {
    var tally = Tally{};
    var k: u64 = 0;
    while (k < 3000) : (k += 1) {
        var prng = casePrng(7, k);
        runCase(prng.random(), &tally) catch |e| {
            std.debug.print("case {d}: {s}\n", .{ k, failureNote() });
            printFields(&current);
            return e;
        };
    }
    try std.testing.expect(tally.accepted_in_memory > 100);
    try std.testing.expect(tally.refused[5] > 10);
}

test "byte-driven cases (the libFuzzer path) hold the same property" {
    const inputs = [_][]const u8{
        "",
        "\x00",
        "\xff" ** 64,
        "dlpack fuzz corpus seed: a few bytes of everything \x01\x02\x80\xfe",
    };
    for (inputs) |input| {
        var source = ByteSource.init(input);
        var tally = Tally{};
        try runCase(source.random(), &tally);
    }
}
