//! `zig build tidy`: style rules run as a check, over every Zig file of the trees named on the
//! command line (zig/src, zig/tools, zig/build.zig and tests/native):
//! - the file is what `zig fmt` would write;
//! - no line is longer than 100 columns (codepoints);
//! - no function is longer than 70 lines, from `fn` to its closing brace;
//! - constants and variables are not SCREAMING_CASE, unless they keep a foreign API's name
//!   (NVIDIA's CUDA, CPython, Apple, Windows);
//! - library code (zig/src) allocates through `std.heap.raw_c_allocator` (error unions; malloc
//!   and free underneath), not `std.c.malloc` (optionals) nor `std.heap.c_allocator`
//!   (posix_memalign for every record, slower on the hot paths);
//! - no `@import` cycle among the files (only "x.zig" path imports are edges; modules such as
//!   "std" or "libdlpack" are not files of these trees).
//! Every violation is printed as `path:line: message`; the exit status is 1 when there is any.

const std = @import("std");
const assert = std.debug.assert;
const Ast = std.zig.Ast;

const line_columns_max = 100;
const function_lines_max = 70;
const file_bytes_max = 4 << 20;
const files_max = 1024;

/// SCREAMING_CASE names that are a foreign API's own spelling.
const foreign_prefixes = [_][]const u8{ "CU_", "CUDA_", "METH_", "VM_PROT_", "PAGE_", "MEM_" };

const File = struct {
    /// As printed: relative to the repository root.
    path: []const u8,
    /// Absolute, for resolving imports.
    absolute: []const u8,
    source: [:0]const u8,
    library: bool,
};

const Violations = struct {
    count: usize = 0,

    fn report(
        self: *Violations,
        file: *const File,
        line: usize,
        comptime format: []const u8,
        args: anytype,
    ) void {
        self.count += 1;
        std.debug.print("{s}:{d}: " ++ format ++ "\n", .{ file.path, line } ++ args);
    }
};

pub fn main() !void {
    var arena_state = std.heap.ArenaAllocator.init(std.heap.page_allocator);
    defer arena_state.deinit();
    const arena = arena_state.allocator();
    const args = try std.process.argsAlloc(arena);
    if (args.len < 3) {
        std.debug.print("usage: tidy <repository root> <file or directory>...\n", .{});
        std.process.exit(2);
    }
    const root = args[1];
    var files: std.ArrayList(File) = .empty;
    for (args[2..]) |path| try collect(arena, root, path, &files);
    var violations: Violations = .{};
    for (files.items) |*file| try checkFile(arena, file, &violations);
    try checkCycles(arena, files.items, &violations);
    if (violations.count > 0) {
        std.debug.print(
            "tidy: {d} violation(s) in {d} files\n",
            .{ violations.count, files.items.len },
        );
        std.process.exit(1);
    }
    std.debug.print("tidy: {d} files clean\n", .{files.items.len});
}

fn collect(
    arena: std.mem.Allocator,
    root: []const u8,
    path: []const u8,
    files: *std.ArrayList(File),
) !void {
    if (std.mem.endsWith(u8, path, ".zig")) return add(arena, root, path, files);
    var dir = try std.fs.cwd().openDir(path, .{ .iterate = true });
    defer dir.close();
    var walker = try dir.walk(arena);
    defer walker.deinit();
    var found: std.ArrayList([]const u8) = .empty;
    while (try walker.next()) |entry| {
        if (entry.kind != .file or !std.mem.endsWith(u8, entry.path, ".zig")) continue;
        if (std.mem.indexOf(u8, entry.path, ".zig-cache") != null) continue;
        try found.append(arena, try std.fs.path.join(arena, &.{ path, entry.path }));
    }
    // Walk order depends on the file system: sort, so reports read the same everywhere.
    std.mem.sort([]const u8, found.items, {}, lessThan);
    for (found.items) |file| try add(arena, root, file, files);
}

fn lessThan(_: void, a: []const u8, b: []const u8) bool {
    return std.mem.lessThan(u8, a, b);
}

fn add(
    arena: std.mem.Allocator,
    root: []const u8,
    path: []const u8,
    files: *std.ArrayList(File),
) !void {
    if (files.items.len == files_max) return error.TooManyFiles;
    const absolute = try std.fs.cwd().realpathAlloc(arena, path);
    const root_absolute = try std.fs.cwd().realpathAlloc(arena, root);
    const shown = try std.fs.path.relative(arena, root_absolute, absolute);
    const source = try std.fs.cwd().readFileAllocOptions(
        arena,
        path,
        file_bytes_max,
        null,
        .of(u8),
        0,
    );
    const library = std.mem.startsWith(u8, shown, "zig" ++ std.fs.path.sep_str ++ "src");
    try files.append(
        arena,
        .{ .path = shown, .absolute = absolute, .source = source, .library = library },
    );
}

fn checkFile(arena: std.mem.Allocator, file: *const File, violations: *Violations) !void {
    var tree = try Ast.parse(arena, file.source, .zig);
    if (tree.errors.len > 0) {
        const first = tree.errors[0];
        violations.report(
            file,
            lineOf(file.source, tree.tokenStart(first.token)),
            "does not parse",
            .{},
        );
        return;
    }
    const formatted = try tree.renderAlloc(arena);
    if (!std.mem.eql(u8, formatted, file.source)) {
        violations.report(
            file,
            firstDifference(formatted, file.source),
            "not zig fmt'ed (run zig fmt)",
            .{},
        );
    }
    checkLines(file, violations);
    checkFunctions(&tree, file, violations);
    checkNames(&tree, file, violations);
    if (file.library) checkAllocations(file, violations);
}

/// The 1-based line of byte `offset`.
fn lineOf(source: []const u8, offset: usize) usize {
    assert(offset <= source.len);
    return std.mem.count(u8, source[0..offset], "\n") + 1;
}

fn firstDifference(a: []const u8, b: []const u8) usize {
    const common = std.mem.indexOfDiff(u8, a, b) orelse return 1;
    return lineOf(b, @min(common, b.len));
}

fn checkLines(file: *const File, violations: *Violations) void {
    var lines = std.mem.splitScalar(u8, file.source, '\n');
    var number: usize = 1;
    while (lines.next()) |line| : (number += 1) {
        const columns = std.unicode.utf8CountCodepoints(line) catch line.len;
        if (columns <= line_columns_max) continue;
        if (std.mem.indexOf(u8, line, "https://") != null) continue;
        violations.report(
            file,
            number,
            "line is {d} columns (at most {d})",
            .{ columns, line_columns_max },
        );
    }
}

fn checkFunctions(tree: *const Ast, file: *const File, violations: *Violations) void {
    for (0..tree.nodes.len) |index| {
        const node: Ast.Node.Index = @enumFromInt(index);
        if (tree.nodeTag(node) != .fn_decl) continue;
        const first = lineOf(file.source, tree.tokenStart(tree.firstToken(node)));
        const last = lineOf(file.source, tree.tokenStart(tree.lastToken(node)));
        assert(last >= first);
        const lines = last - first + 1;
        if (lines <= function_lines_max) continue;
        var buffer: [1]Ast.Node.Index = undefined;
        const proto = tree.fullFnProto(&buffer, node).?;
        const name = if (proto.name_token) |token| tree.tokenSlice(token) else "(anonymous)";
        violations.report(
            file,
            first,
            "fn {s} is {d} lines (at most {d})",
            .{ name, lines, function_lines_max },
        );
    }
}

fn checkNames(tree: *const Ast, file: *const File, violations: *Violations) void {
    const tags = tree.tokens.items(.tag);
    for (tags, 0..) |tag, index| {
        if (tag != .keyword_const and tag != .keyword_var) continue;
        if (index + 1 >= tags.len or tags[index + 1] != .identifier) continue;
        const name = tree.tokenSlice(@intCast(index + 1));
        if (!isScreaming(name) or isForeign(name)) continue;
        const line = lineOf(file.source, tree.tokenStart(@intCast(index + 1)));
        violations.report(file, line, "{s}: constants are snake_case (units last)", .{name});
    }
}

fn isScreaming(name: []const u8) bool {
    if (name.len < 2) return false;
    var letters: usize = 0;
    for (name) |c| switch (c) {
        'A'...'Z' => letters += 1,
        '0'...'9', '_' => {},
        else => return false,
    };
    return letters >= 2;
}

fn isForeign(name: []const u8) bool {
    for (foreign_prefixes) |prefix| if (std.mem.startsWith(u8, name, prefix)) return true;
    return false;
}

fn checkAllocations(file: *const File, violations: *Violations) void {
    for ([_][]const u8{ "std.c." ++ "malloc(", "std.heap." ++ "c_allocator" }) |banned| {
        var from: usize = 0;
        while (std.mem.indexOfPos(u8, file.source, from, banned)) |at| : (from = at + banned.len) {
            const line = lineOf(file.source, at);
            violations.report(file, line, "allocate with std.heap.raw_c_allocator", .{});
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Import cycles

/// The files each file imports by path ("x.zig"), as indices into `files`.
fn importGraph(arena: std.mem.Allocator, files: []const File) ![]const []const usize {
    const edges = try arena.alloc([]const usize, files.len);
    for (files, edges) |*file, *out| {
        var targets: std.ArrayList(usize) = .empty;
        var tree = try Ast.parse(arena, file.source, .zig);
        const tags = tree.tokens.items(.tag);
        for (tags, 0..) |tag, index| {
            if (tag != .builtin or index + 2 >= tags.len) continue;
            if (!std.mem.eql(u8, tree.tokenSlice(@intCast(index)), "@import")) continue;
            if (tags[index + 2] != .string_literal) continue;
            const literal = tree.tokenSlice(@intCast(index + 2));
            const target = literal[1 .. literal.len - 1];
            if (!std.mem.endsWith(u8, target, ".zig")) continue;
            const directory = std.fs.path.dirname(file.absolute).?;
            const resolved = try std.fs.path.resolve(arena, &.{ directory, target });
            for (files, 0..) |other, k| {
                if (std.mem.eql(u8, other.absolute, resolved)) try targets.append(arena, k);
            }
        }
        out.* = targets.items;
    }
    return edges;
}

fn checkCycles(arena: std.mem.Allocator, files: []const File, violations: *Violations) !void {
    const edges = try importGraph(arena, files);
    const cycles = try findCycles(arena, edges);
    for (cycles) |cycle| {
        var text: std.ArrayList(u8) = .empty;
        for (cycle) |k| try text.print(arena, "{s} -> ", .{std.fs.path.basename(files[k].path)});
        try text.appendSlice(arena, std.fs.path.basename(files[cycle[0]].path));
        violations.report(&files[cycle[0]], 1, "import cycle: {s}", .{text.items});
    }
}

const Color = enum { white, grey, black };

/// One cycle per back edge a depth-first search meets (each cycle starts at the file the back
/// edge leads to). An empty result means the graph is acyclic.
fn findCycles(arena: std.mem.Allocator, edges: []const []const usize) ![]const []const usize {
    const colors = try arena.alloc(Color, edges.len);
    @memset(colors, .white);
    var path: std.ArrayList(usize) = .empty;
    var cycles: std.ArrayList([]const usize) = .empty;
    for (0..edges.len) |start| {
        if (colors[start] == .white) try visit(arena, edges, colors, start, &path, &cycles);
    }
    for (colors) |color| assert(color == .black);
    return cycles.items;
}

fn visit(
    arena: std.mem.Allocator,
    edges: []const []const usize,
    colors: []Color,
    node: usize,
    path: *std.ArrayList(usize),
    cycles: *std.ArrayList([]const usize),
) !void {
    assert(colors[node] == .white);
    colors[node] = .grey;
    try path.append(arena, node);
    for (edges[node]) |next| switch (colors[next]) {
        .white => try visit(arena, edges, colors, next, path, cycles),
        .grey => {
            const from = std.mem.lastIndexOfScalar(usize, path.items, next).?;
            try cycles.append(arena, try arena.dupe(usize, path.items[from..]));
        },
        .black => {},
    };
    assert(path.pop().? == node);
    colors[node] = .black;
}

test "cycles: none in a layered graph, every one otherwise" {
    var arena_state = std.heap.ArenaAllocator.init(std.testing.allocator);
    defer arena_state.deinit();
    const arena = arena_state.allocator();
    const layered = [_][]const usize{ &.{ 1, 2 }, &.{2}, &.{} };
    try std.testing.expectEqual(@as(usize, 0), (try findCycles(arena, &layered)).len);
    const tangled = [_][]const usize{ &.{1}, &.{ 0, 2 }, &.{3}, &.{1} };
    const cycles = try findCycles(arena, &tangled);
    try std.testing.expectEqual(@as(usize, 2), cycles.len);
    try std.testing.expectEqualSlices(usize, &.{ 0, 1 }, cycles[0]);
    try std.testing.expectEqualSlices(usize, &.{ 1, 2, 3 }, cycles[1]);
}

test "names: SCREAMING_CASE unless foreign" {
    try std.testing.expect(isScreaming("MAX_RANK"));
    try std.testing.expect(isScreaming("LINE"));
    try std.testing.expect(!isScreaming("T"));
    try std.testing.expect(!isScreaming("CUresult"));
    try std.testing.expect(!isScreaming("rank_max"));
    try std.testing.expect(isForeign("CU_MEMORYTYPE_HOST"));
    try std.testing.expect(!isForeign("STATUS_RAISED"));
}
