//! What a lookup of mappings.zig answers, shared by the platform queries (mappings.zig for Linux,
//! mappings_ports.zig for macOS and Windows): a region and its permissions, or why there is none.

pub const perm_read: u64 = 1;
pub const perm_exec: u64 = 2;
pub const perm_write: u64 = 4;
pub const perms_all: u64 = perm_read | perm_exec | perm_write;

pub const Error = error{
    /// The platform offers no way to ask (no /proc, an unknown OS, a format this parser does not
    /// know): the checks are off from now on.
    Unavailable,
    /// The answer could not be had this time (a listing that changed while it was read, no file
    /// descriptor left): the lookup is refused.
    Inconsistent,
};

/// A region of memory whose every byte has `perms` (0: not mapped, or no access at all). A query
/// returns the one holding the address asked about: `start <= address < end`.
pub const Region = struct {
    start: u64,
    end: u64,
    perms: u64,
};
