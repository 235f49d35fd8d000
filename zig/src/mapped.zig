//! Files as memory, for the tensors-on-disk entry: opening a path that must name a regular file
//! (looked at before it is opened, opened without blocking, and looked at again through the
//! descriptor), mapping it or reading it into memory of the caller's, and writing a file
//! atomically (a new file next to the target, renamed over it once it is complete).
//!
//! The system calls are made through libc directly and their errno is turned into a `Failure`
//! here: the `std.posix` wrappers treat some errno values as unreachable (a panic, which kills the
//! host), and a file system may return any of them. Nothing here keeps state between calls but
//! the `Writer` records it hands out. Owners of mappings are owner.zig's; the C boundary is
//! c_io.zig.

const std = @import("std");
const builtin = @import("builtin");
const assert = std.debug.assert;
const posix = std.posix;

/// Where mapping and the calls below exist (every release target but Windows).
pub const supported = builtin.os.tag != .windows and builtin.link_libc;

/// Bytes a path may have (Linux's PATH_MAX, NUL included); the OS may refuse shorter ones.
pub const path_max: usize = 4096;

/// What a failed call ran into, the same on every OS (errno values are not).
pub const Failure = enum(u8) {
    other = 0,
    not_found = 1,
    access = 2,
    is_directory = 3,
    not_directory = 4,
    loop = 5,
    name_too_long = 6,
    no_space = 7,
    read_only = 8,
    exists = 9,
    busy = 10,
    too_many_files = 11,
    out_of_memory = 12,
    io = 13,
    not_supported = 14,
    cross_device = 15,
    too_large = 16,
    interrupted = 17,
};

/// The call a `Failure` came from.
pub const Call = enum(u8) { stat, open, fstat, mmap, read, create, write, sync, rename, close };

/// What a path that is not a regular file is instead.
pub const Kind = enum(u8) {
    regular = 0,
    directory = 1,
    fifo = 2,
    socket = 3,
    character_device = 4,
    block_device = 5,
    symbolic_link = 6,
    other = 7,
};

/// The details of an error, for the message the caller builds.
pub const Detail = struct {
    call: Call = .open,
    failure: Failure = .other,
    errno: i32 = 0,
    kind: Kind = .regular,
    /// The file's size (`TooLarge`, `Changed`), or the bytes found (`Changed`: `found`).
    size: u64 = 0,
    found: u64 = 0,
};

pub const Error = error{
    /// A system call failed: `Detail.call`, `failure` and `errno` say which and why.
    Os,
    /// The path names something other than a regular file (`Detail.kind`).
    NotRegular,
    /// The file has more bytes than the caller's limit (`Detail.size`).
    TooLarge,
    /// The file has no bytes (there is nothing to map).
    Empty,
    /// The file's size changed while it was read (`Detail.size` expected, `found` read).
    Changed,
    /// The file opened is not the one looked at just before (renamed over in between).
    Replaced,
    /// Not on this OS (`supported`).
    Unsupported,
};

/// `path` (not NUL-terminated) as a NUL-terminated copy in `buffer`; null when it is empty, holds
/// a NUL byte, or is too long.
pub fn terminated(path: []const u8, buffer: *[path_max]u8) ?[:0]const u8 {
    if (path.len == 0 or path.len >= path_max) return null;
    if (std.mem.indexOfScalar(u8, path, 0) != null) return null;
    @memcpy(buffer[0..path.len], path);
    buffer[path.len] = 0;
    return buffer[0..path.len :0];
}

fn failureOf(e: posix.E) Failure {
    return switch (e) {
        .NOENT => .not_found,
        .ACCES, .PERM => .access,
        .ISDIR => .is_directory,
        .NOTDIR => .not_directory,
        .LOOP => .loop,
        .NAMETOOLONG => .name_too_long,
        .NOSPC, .DQUOT => .no_space,
        .ROFS => .read_only,
        .EXIST => .exists,
        .BUSY, .TXTBSY => .busy,
        .MFILE, .NFILE => .too_many_files,
        .NOMEM, .AGAIN => .out_of_memory,
        .IO => .io,
        .NODEV, .OPNOTSUPP, .INVAL => .not_supported,
        .XDEV => .cross_device,
        .FBIG, .OVERFLOW => .too_large,
        .INTR => .interrupted,
        else => .other,
    };
}

/// Records the errno of the failed call in `detail`; returns `error.Os`.
fn failed(detail: *Detail, call: Call) Error {
    const e: posix.E = @enumFromInt(std.c._errno().*);
    detail.* = .{ .call = call, .failure = failureOf(e), .errno = @intFromEnum(e) };
    return error.Os;
}

fn failedWith(detail: *Detail, call: Call, failure: Failure) Error {
    detail.* = .{ .call = call, .failure = failure };
    return error.Os;
}

fn kindOf(mode: u32) Kind {
    const S = posix.S;
    if (S.ISREG(mode)) return .regular;
    if (S.ISDIR(mode)) return .directory;
    if (S.ISFIFO(mode)) return .fifo;
    if (S.ISSOCK(mode)) return .socket;
    if (S.ISCHR(mode)) return .character_device;
    if (S.ISBLK(mode)) return .block_device;
    if (S.ISLNK(mode)) return .symbolic_link;
    return .other;
}

fn statFailure(err: posix.FStatAtError) Failure {
    return switch (err) {
        error.FileNotFound => .not_found,
        error.AccessDenied, error.PermissionDenied => .access,
        error.NameTooLong => .name_too_long,
        error.SymLinkLoop => .loop,
        error.SystemResources => .out_of_memory,
        else => .other,
    };
}

/// A regular file open for reading, and its size when it was opened.
pub const Opened = struct {
    fd: posix.fd_t,
    size: u64,
};

/// Opens `path` for reading, which must name a regular file (symbolic links are followed) of 1 to
/// `limit` bytes. It is looked at first, so nothing else (a device, whose open may act) is ever
/// opened; opened with O_NONBLOCK, so a FIFO put there in between cannot block; and looked at
/// again through the descriptor, which must name the same file. Close it with `close`.
pub fn open(path: [:0]const u8, limit: u64, detail: *Detail) Error!Opened {
    if (!supported) return error.Unsupported;
    const seen = posix.fstatatZ(posix.AT.FDCWD, path, 0) catch |err|
        return failedWith(detail, .stat, statFailure(err));
    try checkRegular(seen, limit, detail);
    const flags: posix.O = .{
        .ACCMODE = .RDONLY,
        .NONBLOCK = true,
        .CLOEXEC = true,
        .NOCTTY = true,
    };
    const fd = std.c.open(path, flags);
    if (fd < 0) return failed(detail, .open);
    errdefer posix.close(fd);
    const now = posix.fstat(fd) catch |err| return failedWith(detail, .fstat, statFailure(err));
    try checkRegular(now, limit, detail);
    if (now.dev != seen.dev or now.ino != seen.ino) return error.Replaced;
    return .{ .fd = fd, .size = @intCast(now.size) };
}

fn checkRegular(stat: posix.Stat, limit: u64, detail: *Detail) Error!void {
    const kind = kindOf(@intCast(stat.mode));
    if (kind != .regular) {
        detail.* = .{ .call = .stat, .kind = kind };
        return error.NotRegular;
    }
    if (stat.size <= 0) return error.Empty;
    const size: u64 = @intCast(stat.size);
    if (size > limit) {
        detail.* = .{ .call = .stat, .size = size };
        return error.TooLarge;
    }
}

pub fn close(opened: Opened) void {
    if (!supported) return;
    posix.close(opened.fd);
}

/// Maps the whole file: shared and read-only, or (`writable`) private, readable and writable (a
/// write changes this process's copy of the page, never the file). Unmap with `unmap`.
pub fn map(opened: Opened, writable: bool, detail: *Detail) Error![*]u8 {
    if (!supported) return error.Unsupported;
    assert(opened.size > 0);
    const size = std.math.cast(usize, opened.size) orelse
        return failedWith(detail, .mmap, .too_large);
    const prot: c_uint = if (writable) posix.PROT.READ | posix.PROT.WRITE else posix.PROT.READ;
    const flags: std.c.MAP = .{ .TYPE = if (writable) .PRIVATE else .SHARED };
    const at = std.c.mmap(null, size, prot, flags, opened.fd, 0);
    if (at == std.c.MAP_FAILED) return failed(detail, .mmap);
    return @ptrCast(at);
}

/// Gives back a mapping `map` made (`bytes`: the size it was made with).
pub fn unmap(address: usize, bytes: usize) void {
    if (!supported) return;
    assert(address % std.heap.pageSize() == 0 and bytes > 0);
    // Fails only for a range that is no mapping, which the owner record never holds.
    _ = std.c.munmap(@ptrFromInt(address), bytes);
}

/// Reads the whole file into `into` (exactly its size). The file may not have changed size since
/// it was opened: a shorter or longer file is `error.Changed`.
pub fn read(opened: Opened, into: []u8, detail: *Detail) Error!void {
    if (!supported) return error.Unsupported;
    assert(into.len == opened.size);
    var done: usize = 0;
    while (done < into.len) {
        const chunk = @min(into.len - done, 1 << 30);
        const n = std.c.pread(opened.fd, into[done..].ptr, chunk, @intCast(done));
        if (n < 0) {
            if (posix.errno(n) == .INTR) continue;
            return failed(detail, .read);
        }
        if (n == 0) break;
        done += @intCast(n);
    }
    var probe: [1]u8 = undefined;
    const extra = if (done == into.len) std.c.pread(opened.fd, &probe, 1, @intCast(done)) else 0;
    if (done != into.len or extra > 0) {
        const found = done + @as(usize, @intCast(@max(extra, 0)));
        detail.* = .{ .call = .read, .size = opened.size, .found = found };
        return error.Changed;
    }
}

// ---------------------------------------------------------------------------------------------
// Writing a file atomically: readers of the target see the old file or the whole new one.

/// Bytes of a temporary file's name beyond the target's base name (".", ".<pid>-<n>.tmp").
const temporary_extra: usize = 48;
/// Bytes of the target's base name kept in the temporary name (most file systems allow 255).
const temporary_base_max: usize = 160;
const writer_magic: u64 = 0x646c_706b_7772_6974; // "dlpkwrit"

/// A file being written: the temporary file (open, next to the target) and the target's path.
pub const Writer = struct {
    magic: u64,
    fd: posix.fd_t,
    temporary: [path_max + temporary_extra:0]u8,
    target: [path_max:0]u8,
};

var temporary_counter = std.atomic.Value(u32).init(0);

/// The temporary name for `target` with `attempt`: `<dir>/.<base>.<pid>-<n>.tmp` (the base cut to
/// `temporary_base_max` bytes), in `out`.
fn temporaryName(target: []const u8, n: u32, out: []u8) ?[:0]u8 {
    const slash = std.mem.lastIndexOfScalar(u8, target, '/');
    const dir = if (slash) |s| target[0 .. s + 1] else "";
    const base = target[dir.len..][0..@min(target.len - dir.len, temporary_base_max)];
    const pid: i64 = if (supported) std.c.getpid() else 0;
    return std.fmt.bufPrintZ(out, "{s}.{s}.{d}-{d}.tmp", .{ dir, base, pid, n }) catch null;
}

/// Creates the temporary file for `target` (a path checked by `terminated`). Its mode is 0666 less
/// the umask, as for any new file. Give the writer back with `finish`.
pub fn create(target: [:0]const u8, detail: *Detail) (Error || error{OutOfMemory})!*Writer {
    if (!supported) return error.Unsupported;
    assert(target.len < path_max);
    const writer = try std.heap.raw_c_allocator.create(Writer);
    errdefer std.heap.raw_c_allocator.destroy(writer);
    writer.magic = writer_magic;
    @memcpy(writer.target[0..target.len], target);
    writer.target[target.len] = 0;
    const flags: posix.O = .{ .ACCMODE = .WRONLY, .CREAT = true, .EXCL = true, .CLOEXEC = true };
    var attempts: u32 = 0;
    while (true) : (attempts += 1) {
        const n = temporary_counter.fetchAdd(1, .monotonic);
        const name = temporaryName(target, n, &writer.temporary) orelse
            return failedWith(detail, .create, .name_too_long);
        const fd = std.c.open(name, flags, @as(c_uint, 0o666));
        if (fd >= 0) {
            writer.fd = fd;
            return writer;
        }
        // A name another process took (O_EXCL also refuses a symbolic link): take the next one.
        if (posix.errno(fd) != .EXIST or attempts == 16) return failed(detail, .create);
    }
}

/// Whether `address` holds a live writer of `create` (the caller made sure it is readable).
pub fn isWriter(writer: *const Writer) bool {
    return writer.magic == writer_magic;
}

/// Appends `bytes` to the temporary file.
pub fn write(writer: *Writer, bytes: []const u8, detail: *Detail) Error!void {
    if (!supported) return error.Unsupported;
    assert(isWriter(writer));
    var done: usize = 0;
    while (done < bytes.len) {
        const chunk = @min(bytes.len - done, 1 << 30);
        const n = std.c.write(writer.fd, bytes[done..].ptr, chunk);
        if (n < 0) {
            if (posix.errno(n) == .INTR) continue;
            return failed(detail, .write);
        }
        // write(2) of a regular file writes at least one byte or fails (ENOSPC).
        if (n == 0) return failedWith(detail, .write, .no_space);
        done += @intCast(n);
    }
}

/// Ends a writer and frees it. `commit`: the data is flushed to the disk and the temporary file
/// renamed over the target; otherwise, or when any of that fails, the temporary file is removed.
pub fn finish(writer: *Writer, commit: bool, detail: *Detail) Error!void {
    if (!supported) return error.Unsupported;
    assert(isWriter(writer));
    writer.magic = 0;
    defer std.heap.raw_c_allocator.destroy(writer);
    const temporary: [*:0]const u8 = &writer.temporary;
    if (!commit) {
        posix.close(writer.fd);
        _ = std.c.unlink(temporary);
        return;
    }
    flushAndRename(writer, detail) catch |err| {
        _ = std.c.unlink(temporary);
        return err;
    };
}

/// fsync, close (which reports write-back errors of some file systems, NFS's), rename. The
/// descriptor is closed whatever happens.
fn flushAndRename(writer: *Writer, detail: *Detail) Error!void {
    // EINVAL: a file system that cannot sync (nothing more can be done for the data there).
    if (std.c.fsync(writer.fd) != 0 and posix.errno(@as(c_int, -1)) != .INVAL) {
        const err = failed(detail, .sync);
        posix.close(writer.fd);
        return err;
    }
    if (std.c.close(writer.fd) != 0) return failed(detail, .close);
    if (std.c.rename(&writer.temporary, &writer.target) != 0) return failed(detail, .rename);
}

// ---------------------------------------------------------------------------------------------
// Tests

const testing = std.testing;

/// The absolute path of `name` in the test's folder, NUL-terminated, in `out`.
fn testPath(tmp: *testing.TmpDir, name: []const u8, out: *[path_max]u8) ![:0]const u8 {
    var dir_buffer: [path_max]u8 = undefined;
    const dir = try tmp.dir.realpath(".", &dir_buffer);
    return std.fmt.bufPrintZ(out, "{s}/{s}", .{ dir, name });
}

extern "c" fn mkfifo(path: [*:0]const u8, mode: std.c.mode_t) c_int;

test "a file mapped shared and read-only, privately and writable, and read into memory" {
    if (!supported) return error.SkipZigTest;
    var tmp = testing.tmpDir(.{});
    defer tmp.cleanup();
    try tmp.dir.writeFile(.{ .sub_path = "f.bin", .data = "hello, mapped world" });
    var buffer: [path_max]u8 = undefined;
    const path = try testPath(&tmp, "f.bin", &buffer);
    var detail: Detail = .{};
    for ([_]bool{ false, true }) |writable| {
        const opened = try open(path, 1 << 20, &detail);
        defer close(opened);
        try testing.expectEqual(@as(u64, 19), opened.size);
        const at = try map(opened, writable, &detail);
        defer unmap(@intFromPtr(at), 19);
        try testing.expectEqualStrings("hello, mapped world", at[0..19]);
        if (writable) at[0] = 'J';
    }
    // The private write never reached the file.
    var copy: [19]u8 = undefined;
    const opened = try open(path, 19, &detail);
    defer close(opened);
    try read(opened, &copy, &detail);
    try testing.expectEqualStrings("hello, mapped world", &copy);
}

test "what is not a regular file of 1 to limit bytes is refused before it is opened" {
    if (!supported) return error.SkipZigTest;
    var tmp = testing.tmpDir(.{});
    defer tmp.cleanup();
    try tmp.dir.makeDir("folder");
    try tmp.dir.writeFile(.{ .sub_path = "empty", .data = "" });
    try tmp.dir.writeFile(.{ .sub_path = "big", .data = "0123456789" });
    var buffer: [path_max]u8 = undefined;
    var detail: Detail = .{};
    const folder = try testPath(&tmp, "folder", &buffer);
    try testing.expectError(error.NotRegular, open(folder, 64, &detail));
    try testing.expectEqual(Kind.directory, detail.kind);
    // A FIFO with no writer: an open that blocked would hang this test.
    const fifo = try testPath(&tmp, "fifo", &buffer);
    try testing.expectEqual(@as(c_int, 0), mkfifo(fifo, 0o600));
    try testing.expectError(error.NotRegular, open(fifo, 64, &detail));
    try testing.expectEqual(Kind.fifo, detail.kind);
    try testing.expectError(error.NotRegular, open("/dev/null", 64, &detail));
    try testing.expectEqual(Kind.character_device, detail.kind);
    try testing.expectError(error.Empty, open(try testPath(&tmp, "empty", &buffer), 64, &detail));
    try testing.expectError(error.TooLarge, open(try testPath(&tmp, "big", &buffer), 9, &detail));
    try testing.expectEqual(@as(u64, 10), detail.size);
    try testing.expectError(error.Os, open(try testPath(&tmp, "none", &buffer), 64, &detail));
    try testing.expectEqual(Failure.not_found, detail.failure);
    try testing.expectEqual(Call.stat, detail.call);
}

test "paths: empty, with a NUL, or too long are refused" {
    var buffer: [path_max]u8 = undefined;
    try testing.expect(terminated("", &buffer) == null);
    try testing.expect(terminated("a\x00b", &buffer) == null);
    try testing.expect(terminated(&([_]u8{'a'} ** path_max), &buffer) == null);
    try testing.expectEqualStrings("x/y", terminated("x/y", &buffer).?);
}

test "a writer replaces its target only when committed, and leaves no temporary file" {
    if (!supported) return error.SkipZigTest;
    var tmp = testing.tmpDir(.{ .iterate = true });
    defer tmp.cleanup();
    try tmp.dir.writeFile(.{ .sub_path = "out.bin", .data = "old" });
    var buffer: [path_max]u8 = undefined;
    const target = try testPath(&tmp, "out.bin", &buffer);
    var detail: Detail = .{};
    const abandoned = try create(target, &detail);
    try write(abandoned, "never seen", &detail);
    try finish(abandoned, false, &detail);
    var content: [16]u8 = undefined;
    try testing.expectEqualStrings("old", try tmp.dir.readFile("out.bin", &content));
    const kept = try create(target, &detail);
    try write(kept, "new ", &detail);
    try write(kept, "bytes", &detail);
    try finish(kept, true, &detail);
    try testing.expectEqualStrings("new bytes", try tmp.dir.readFile("out.bin", &content));
    var entries: usize = 0;
    var it = tmp.dir.iterate();
    while (try it.next()) |_| entries += 1;
    try testing.expectEqual(@as(usize, 1), entries);
    // A folder that does not exist: nothing is created.
    const nowhere = try testPath(&tmp, "missing/out.bin", &buffer);
    try testing.expectError(error.Os, create(nowhere, &detail));
    try testing.expectEqual(Failure.not_found, detail.failure);
}
