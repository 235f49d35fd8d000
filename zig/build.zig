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
}
