const std = @import("std");
const builtin = @import("builtin");

// tools/bootstrap.sh installs exactly this version; anything else may build a different ABI.
const required_zig = "0.15.2";

comptime {
    const want = std.SemanticVersion.parse(required_zig) catch unreachable;
    if (builtin.zig_version.order(want) != .eq) {
        @compileError("libdlpack builds with Zig " ++ required_zig ++ " (run tools/bootstrap.sh); this is " ++ builtin.zig_version_string);
    }
}

pub fn build(b: *std.Build) void {
    const target = b.standardTargetOptions(.{});
    const optimize = b.standardOptimizeOption(.{ .preferred_optimize_mode = .ReleaseSafe });

    const core = b.createModule(.{
        .root_source_file = b.path("src/root.zig"),
        .target = target,
        .optimize = optimize,
        .link_libc = true,
    });
    const lib = b.addLibrary(.{ .name = "dlpack", .linkage = .dynamic, .root_module = core });
    b.installArtifact(lib);

    // Foreign producers: the demo's (C) and the test suite's (Zig, with deleter counters).
    const demo = b.createModule(.{ .target = target, .optimize = optimize, .link_libc = true });
    demo.addCSourceFile(.{ .file = b.path("../examples/producer.c"), .flags = &.{ "-std=c11", "-Wall", "-Wextra", "-Werror" } });
    b.installArtifact(b.addLibrary(.{ .name = "demo_producer", .linkage = .dynamic, .root_module = demo }));

    const testprod = b.createModule(.{
        .root_source_file = b.path("../tests/native/testprod.zig"),
        .target = target,
        .optimize = optimize,
        .link_libc = true,
    });
    testprod.addImport("dlpack", b.createModule(.{ .root_source_file = b.path("src/dlpack.zig"), .target = target, .optimize = optimize }));
    b.installArtifact(b.addLibrary(.{ .name = "dlpack_testprod", .linkage = .dynamic, .root_module = testprod }));

    // A FAKE CUDA driver over host memory, for the tests of the driver-facing code on machines
    // without a GPU (loaded through DLPACK_CUDA_LIB; never shipped).
    const fakecuda = b.createModule(.{
        .root_source_file = b.path("../tests/native/fakecuda.zig"),
        .target = target,
        .optimize = optimize,
        .link_libc = true,
    });
    b.installArtifact(b.addLibrary(.{ .name = "dlpack_fakecuda", .linkage = .dynamic, .root_module = fakecuda }));

    const test_step = b.step("test", "Run the Zig unit tests");
    const unit = b.addTest(.{ .root_module = b.createModule(.{
        .root_source_file = b.path("src/root.zig"),
        .target = target,
        .optimize = .Debug,
        .link_libc = true,
    }) });
    test_step.dependOn(&b.addRunArtifact(unit).step);

    addRelease(b);
}

/// The release matrix. The glibc 2.17 floor (CentOS 7, 2014) lets the Linux builds load on old
/// distributions; the names are the `<os>-<arch>` parts of the artifact names, spelled as
/// `Deno.build.os` / `Deno.build.arch` spell them so the loader can form them without a table.
const release_targets = [_]struct { triple: []const u8, os: []const u8, arch: []const u8, ext: []const u8 }{
    .{ .triple = "x86_64-linux-gnu.2.17", .os = "linux", .arch = "x86_64", .ext = "so" },
    .{ .triple = "aarch64-linux-gnu.2.17", .os = "linux", .arch = "aarch64", .ext = "so" },
    .{ .triple = "x86_64-macos.11.0", .os = "darwin", .arch = "x86_64", .ext = "dylib" },
    .{ .triple = "aarch64-macos.11.0", .os = "darwin", .arch = "aarch64", .ext = "dylib" },
    .{ .triple = "x86_64-windows-gnu", .os = "windows", .arch = "x86_64", .ext = "dll" },
};

/// `zig build release -Dversion=X --prefix DIR`: libdlpack for every release target, stripped, as
/// DIR/libdlpack-X-<os>-<arch>.<ext> (tools/release.sh adds the checksums). Separate from the
/// default install so everyday builds stay native-only.
fn addRelease(b: *std.Build) void {
    const step = b.step("release", "Cross-build libdlpack for every release target (-Dversion required)");
    const version = b.option([]const u8, "version", "Release version that names the artifacts (deno.json \"version\")") orelse {
        step.dependOn(&b.addFail("zig build release needs -Dversion=<deno.json version>").step);
        return;
    };
    for (release_targets) |spec| {
        const query = std.Target.Query.parse(.{ .arch_os_abi = spec.triple }) catch @panic("bad release triple");
        const module = b.createModule(.{
            .root_source_file = b.path("src/root.zig"),
            .target = b.resolveTargetQuery(query),
            .optimize = .ReleaseSafe,
            .link_libc = true,
            // Debug info would triple the download and embed this checkout's paths, which would make
            // the bytes (and so the published checksums) depend on where the build ran.
            .strip = true,
        });
        const lib = b.addLibrary(.{ .name = "dlpack", .linkage = .dynamic, .root_module = module });
        const name = b.fmt("libdlpack-{s}-{s}-{s}.{s}", .{ version, spec.os, spec.arch, spec.ext });
        step.dependOn(&b.addInstallFileWithDir(lib.getEmittedBin(), .prefix, name).step);
    }
}
