const std = @import("std");
const builtin = @import("builtin");

// tools/bootstrap.sh installs exactly this version; anything else may build a different ABI.
const required_zig = "0.15.2";

comptime {
    const want = std.SemanticVersion.parse(required_zig) catch unreachable;
    if (builtin.zig_version.order(want) != .eq) {
        @compileError("libdlpack builds with Zig " ++ required_zig ++
            " (run tools/bootstrap.sh); this is " ++ builtin.zig_version_string);
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
        // Release-safe builds check every slice and array index already, and the one stack buffer
        // handed to C (the CUDA device name) goes with its length; canaries would add only their
        // cost: a load and compare in each function with a stack array, ~1 ns per import.
        .stack_protector = false,
    });
    // Through LLVM in every mode: a Debug build by Zig's own x86_64 backend misbehaves as a
    // dlopen'ed library (counters lost, a crash draining released pins) where the same Debug
    // build through LLVM passes the core tests; release modes use LLVM anyway.
    const lib = b.addLibrary(.{
        .name = "dlpack",
        .linkage = .dynamic,
        .root_module = core,
        .use_llvm = true,
    });
    b.installArtifact(lib);
    addProducers(b, target, optimize);

    const test_step = b.step("test", "Run the Zig unit tests");
    const unit = b.addTest(.{ .root_module = b.createModule(.{
        .root_source_file = b.path("src/root.zig"),
        .target = target,
        .optimize = .Debug,
        .link_libc = true,
    }) });
    test_step.dependOn(&b.addRunArtifact(unit).step);
    // The copy kernels (memory.zig and the transposes and streaming stores it imports) once more
    // through LLVM: Zig's own x86 backend (Debug) cannot assemble the non-temporal stores, so only
    // this build runs the streaming paths.
    const kernels = b.addTest(.{ .use_llvm = true, .root_module = b.createModule(.{
        .root_source_file = b.path("src/memory.zig"),
        .target = target,
        .optimize = .Debug,
        .link_libc = true,
    }) });
    test_step.dependOn(&b.addRunArtifact(kernels).step);

    addRelease(b);
    const reliability = addFuzzAndThreads(b, target, test_step);
    addValgrind(b, reliability);
    addTidy(b, target, test_step);
    addBenchImport(b, target);
    addAbi(b, target, test_step);
}

/// Foreign producers: the demo's (C) and the test suite's (Zig, with deleter counters), and a
/// FAKE CUDA driver over host memory, for the tests of the driver-facing code on machines
/// without a GPU (loaded through DLPACK_CUDA_LIB; never shipped).
fn addProducers(
    b: *std.Build,
    target: std.Build.ResolvedTarget,
    optimize: std.builtin.OptimizeMode,
) void {
    const demo = b.createModule(.{ .target = target, .optimize = optimize, .link_libc = true });
    demo.addCSourceFile(.{
        .file = b.path("../examples/producer.c"),
        .flags = &.{ "-std=c11", "-Wall", "-Wextra", "-Werror" },
    });
    b.installArtifact(b.addLibrary(.{
        .name = "demo_producer",
        .linkage = .dynamic,
        .root_module = demo,
    }));

    const testprod = b.createModule(.{
        .root_source_file = b.path("../tests/native/testprod.zig"),
        .target = target,
        .optimize = optimize,
        .link_libc = true,
    });
    testprod.addImport("dlpack", b.createModule(.{
        .root_source_file = b.path("src/dlpack.zig"),
        .target = target,
        .optimize = optimize,
    }));
    b.installArtifact(b.addLibrary(.{
        .name = "dlpack_testprod",
        .linkage = .dynamic,
        .use_llvm = true, // as the library: see above
        .root_module = testprod,
    }));

    const fakecuda = b.createModule(.{
        .root_source_file = b.path("../tests/native/fakecuda.zig"),
        .target = target,
        .optimize = optimize,
        .link_libc = true,
    });
    b.installArtifact(b.addLibrary(.{
        .name = "dlpack_fakecuda",
        .linkage = .dynamic,
        .use_llvm = true, // as the library: see above
        .root_module = fakecuda,
    }));
}

/// `zig build bench-import [-- --count N --rounds R --misses N --extra-mappings M --threads T
/// --thread-count K]`: ns per native import + release through the installed library and test
/// producer (tests/native/import_loop.zig), in thread CPU time; imports after a miss of the
/// mappings cache; imports and exports on T threads against one. Pass --release=safe to measure
/// what tools/build.sh builds.
fn addBenchImport(b: *std.Build, target: std.Build.ResolvedTarget) void {
    const exe = b.addExecutable(.{ .name = "import_loop", .root_module = b.createModule(.{
        .root_source_file = b.path("../tests/native/import_loop.zig"),
        .target = target,
        .optimize = .ReleaseFast,
        .link_libc = true,
    }) });
    // The description's layout and the option bits, as the library declares them.
    exe.root_module.addImport("abi", b.createModule(.{
        .root_source_file = b.path("src/abi.zig"),
        .target = target,
        .optimize = .ReleaseFast,
    }));
    const run = b.addRunArtifact(exe);
    run.step.dependOn(b.getInstallStep());
    const suffix = target.result.dynamicLibSuffix();
    run.addArg(b.getInstallPath(.lib, b.fmt("libdlpack{s}", .{suffix})));
    run.addArg(b.getInstallPath(.lib, b.fmt("libdlpack_testprod{s}", .{suffix})));
    if (b.args) |args| run.addArgs(args);
    run.has_side_effects = true;
    const help = "Time a native import + release loop over the installed library";
    b.step("bench-import", help).dependOn(&run.step);
}

/// `zig build abi` writes src/facts/abi.ts from the Zig declarations (src/abi_ts.zig); `zig build
/// abi-check` regenerates it into the cache and fails when the committed file differs.
fn addAbi(b: *std.Build, target: std.Build.ResolvedTarget, test_step: *std.Build.Step) void {
    const module = b.createModule(.{
        .root_source_file = b.path("src/abi_ts.zig"),
        .target = target,
        .optimize = .Debug,
        .link_libc = true,
    });
    const exe = b.addExecutable(.{ .name = "abi_ts", .root_module = module });
    const generate = b.addRunArtifact(exe);
    const generated = generate.addOutputFileArg("abi.ts");
    const update = b.addUpdateSourceFiles();
    update.addCopyFileToSource(generated, "../src/facts/abi.ts");
    b.step("abi", "Write src/facts/abi.ts from the Zig declarations").dependOn(&update.step);
    const compare = b.addRunArtifact(exe);
    compare.addArg("--compare");
    compare.addFileArg(generated);
    compare.addArg(b.pathFromRoot("../src/facts/abi.ts"));
    compare.has_side_effects = true;
    const check_help = "Fail when src/facts/abi.ts differs from what zig build abi writes";
    b.step("abi-check", check_help).dependOn(&compare.step);
    // Only the generator's own tests: the library's run in the main test binary.
    const tests = b.addTest(.{ .root_module = module, .filters = &.{"generated TS"} });
    test_step.dependOn(&b.addRunArtifact(tests).step);
}

/// `zig build tidy`: zig fmt, 100 columns, 70-line functions, snake_case constants, one allocator
/// convention and no import cycle, over every Zig file of zig/ and tests/native (tools/tidy.zig).
fn addTidy(b: *std.Build, target: std.Build.ResolvedTarget, test_step: *std.Build.Step) void {
    const module = b.createModule(.{
        .root_source_file = b.path("tools/tidy.zig"),
        .target = target,
        .optimize = .Debug,
    });
    const run = b.addRunArtifact(b.addExecutable(.{ .name = "tidy", .root_module = module }));
    run.addArg(b.pathFromRoot(".."));
    for ([_][]const u8{ "build.zig", "src", "tools", "../tests/native" }) |path| {
        run.addArg(b.pathFromRoot(path));
    }
    run.has_side_effects = true;
    b.step("tidy", "Check the style rules of tools/tidy.zig").dependOn(&run.step);
    test_step.dependOn(&b.addRunArtifact(b.addTest(.{ .root_module = module })).step);
}

/// The release matrix. The glibc 2.17 floor (CentOS 7, 2014) lets the Linux builds load on old
/// distributions; the names are the `<os>-<arch>` parts of the artifact names, spelled as
/// `Deno.build.os` / `Deno.build.arch` spell them so the loader can form them without a table.
const ReleaseTarget = struct {
    triple: []const u8,
    os: []const u8,
    arch: []const u8,
    ext: []const u8,
};
const release_targets = [_]ReleaseTarget{
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
    const help = "Cross-build libdlpack for every release target (-Dversion required)";
    const step = b.step("release", help);
    const version = b.option(
        []const u8,
        "version",
        "Release version that names the artifacts (deno.json \"version\")",
    ) orelse {
        step.dependOn(&b.addFail("zig build release needs -Dversion=<deno.json version>").step);
        return;
    };
    for (release_targets) |spec| {
        const query = std.Target.Query.parse(.{ .arch_os_abi = spec.triple }) catch
            @panic("bad release triple");
        const module = b.createModule(.{
            .root_source_file = b.path("src/root.zig"),
            .target = b.resolveTargetQuery(query),
            .optimize = .ReleaseSafe,
            .link_libc = true,
            .stack_protector = false, // as in the local build (see `build`)
            // Debug info would triple the download and embed this checkout's paths, which would
            // make the bytes (and so the published checksums) depend on where the build ran.
            .strip = true,
        });
        const lib = b.addLibrary(.{ .name = "dlpack", .linkage = .dynamic, .root_module = module });
        const name = b.fmt("libdlpack-{s}-{s}-{s}.{s}", .{ version, spec.os, spec.arch, spec.ext });
        step.dependOn(&b.addInstallFileWithDir(lib.getEmittedBin(), .prefix, name).step);
    }
}

// ---------------------------------------------------------------------------------------------
// Reliability: the validator fuzzer, the thread stress test and the valgrind runs
// (tests/native/, docs/reliability.md).

/// The library's sources as a module a harness imports (so its `export fn`s link into the
/// harness).
fn coreModule(
    b: *std.Build,
    target: std.Build.ResolvedTarget,
    optimize: std.builtin.OptimizeMode,
    fuzz: bool,
) *std.Build.Module {
    return b.createModule(.{
        .root_source_file = b.path("src/root.zig"),
        .target = target,
        .optimize = optimize,
        .link_libc = true,
        .fuzz = fuzz,
    });
}

fn harness(
    b: *std.Build,
    file: []const u8,
    target: std.Build.ResolvedTarget,
    optimize: std.builtin.OptimizeMode,
    fuzz: bool,
) *std.Build.Module {
    const m = b.createModule(.{
        .root_source_file = b.path(file),
        .target = target,
        .optimize = optimize,
        .link_libc = true,
        .fuzz = fuzz,
    });
    m.addImport("libdlpack", coreModule(b, target, optimize, fuzz));
    return m;
}

/// The reliability executable and the target it was built for, shared with the valgrind runs.
const Reliability = struct {
    exe: *std.Build.Step.Compile,
    portable: std.Build.ResolvedTarget,
};

/// `zig build fuzz`, `zig build threads` and `zig build fuzz-lib`; the harnesses' own unit tests
/// (short runs, regressions) join `zig build test`.
fn addFuzzAndThreads(
    b: *std.Build,
    target: std.Build.ResolvedTarget,
    test_step: *std.Build.Step,
) Reliability {
    const main_source = "../tests/native/reliability.zig";
    // Valgrind cannot decode AVX-512, so the harness targets the baseline x86-64 CPU: the same
    // binary then serves the native runs and the valgrind runs (one ReleaseSafe compile in CI).
    // ReleaseSafe keeps every overflow and bounds check of the library armed and runs the fuzzer
    // 30x faster than Debug.
    var query = target.query;
    if (target.result.cpu.arch == .x86_64) query.cpu_model = .baseline;
    const portable = b.resolveTargetQuery(query);
    const exe = b.addExecutable(.{
        .name = "reliability",
        .root_module = harness(b, main_source, portable, .ReleaseSafe, false),
    });

    // `zig build fuzz -- --seed N --cases N` (or `--seconds S`, or `--case K` to replay one).
    const fuzz_run = b.addRunArtifact(exe);
    fuzz_run.addArg("fuzz");
    if (b.args) |args| fuzz_run.addArgs(args);
    const fuzz_help = "Fuzz the import validator with a fixed seed " ++
        "(args: --seed N --cases N | --seconds S | --case K)";
    b.step("fuzz", fuzz_help).dependOn(&fuzz_run.step);

    // `zig build threads -- --releases N --threads T`
    const threads_run = b.addRunArtifact(exe);
    threads_run.addArg("threads");
    if (b.args) |args| threads_run.addArgs(args);
    const threads_help = "Release imports, exports, pins and allocations from many threads at once";
    b.step("threads", threads_help).dependOn(&threads_run.step);

    const unit = b.addTest(.{ .root_module = harness(b, main_source, target, .Debug, false) });
    test_step.dependOn(&b.addRunArtifact(unit).step);

    // A static, coverage-instrumented build of the fuzzer for libFuzzer (tools/fuzz.sh links it
    // with clang -fsanitize=fuzzer). Zig 0.15.2's own `zig build test --fuzz` crashes in its build
    // runner (ziglang/zig#25798), so the instrumentation is used with libFuzzer instead.
    const fuzz_lib = b.addLibrary(.{
        .name = "fuzz_validator",
        .linkage = .static,
        .root_module = harness(b, "../tests/native/fuzz_validator.zig", target, .ReleaseSafe, true),
    });
    fuzz_lib.bundle_compiler_rt = true;
    const install_fuzz_lib = b.addInstallArtifact(fuzz_lib, .{});
    const fuzz_lib_help = "Build the libFuzzer target (see tools/fuzz.sh)";
    b.step("fuzz-lib", fuzz_lib_help).dependOn(&install_fuzz_lib.step);
    return .{ .exe = exe, .portable = portable };
}

/// `zig build valgrind`: the unit tests (Debug), a fuzz run and the thread stress test under
/// memcheck; any error or leak fails the step.
fn addValgrind(b: *std.Build, reliability: Reliability) void {
    const memcheck = [_][]const u8{
        "valgrind",
        "--tool=memcheck",
        "--error-exitcode=99",
        "--leak-check=full",
        "--show-leak-kinds=definite,indirect,possible",
        "--errors-for-leak-kinds=definite,indirect,possible",
        "--quiet",
    };
    const help = "Run the unit tests, a fuzz run and the thread stress test under valgrind " ++
        "memcheck";
    const vg_step = b.step("valgrind", help);
    const unit = b.addTest(.{ .root_module = coreModule(b, reliability.portable, .Debug, false) });
    const exe = reliability.exe;
    const Run = struct { artifact: *std.Build.Step.Compile, args: []const []const u8 };
    const runs = [_]Run{
        .{ .artifact = unit, .args = &.{} },
        .{ .artifact = exe, .args = &.{ "fuzz", "--seed", "11", "--cases", "50000" } },
        .{ .artifact = exe, .args = &.{ "threads", "--releases", "20000", "--threads", "8" } },
    };
    for (runs) |run| {
        const cmd = b.addSystemCommand(&memcheck);
        cmd.addArtifactArg(run.artifact);
        cmd.addArgs(run.args);
        cmd.has_side_effects = true;
        vg_step.dependOn(&cmd.step);
    }
}
