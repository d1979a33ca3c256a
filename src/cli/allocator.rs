//! Tuning of the process allocator (the binary's; the benches include this file). The binary and the benches use mimalloc as the global
//! allocator. candle allocates a fresh buffer for every tensor operation; with mimalloc's
//! default purge delay the pages of freed large buffers go back to the kernel and are
//! faulted in and zeroed again on their next use (measured with `perf record` on
//! `benches/update.rs`: 20-47% of a training step in the kernel's `clear_page`). Keeping
//! freed memory mapped trades a higher resident size between steps (the peak is the same)
//! for that time.

use libmimalloc_sys::{mi_option_set, mi_option_t};

/// `mi_option_purge_delay` in the option enum of the bundled mimalloc v3 (`mimalloc.h`; the
/// sys crate exports the name only for v2). The test below reads the documented
/// default (1000 ms) back through this index.
const MI_OPTION_PURGE_DELAY: mi_option_t = 15;

/// Never return freed memory to the kernel. Call once at start-up.
#[allow(unsafe_code)]
pub fn keep_freed_memory() {
    // SAFETY: `mi_option_set` stores an integer in mimalloc's option table; it takes no
    // pointers, and the index is a valid option (see `MI_OPTION_PURGE_DELAY`).
    unsafe { mi_option_set(MI_OPTION_PURGE_DELAY, -1) }
}

#[cfg(test)]
mod tests {
    use super::{MI_OPTION_PURGE_DELAY, keep_freed_memory};

    /// mimalloc's current purge delay in milliseconds (-1: never purge).
    #[allow(unsafe_code)]
    #[allow(
        clippy::useless_conversion,
        reason = "c_long is i64 here but i32 on other targets"
    )]
    fn purge_delay() -> i64 {
        // SAFETY: as in `keep_freed_memory`; `mi_option_get` only reads the table.
        i64::from(unsafe { libmimalloc_sys::mi_option_get(MI_OPTION_PURGE_DELAY) })
    }

    #[test]
    fn the_index_is_the_purge_delay_and_setting_it_sticks() {
        if std::env::var_os("MIMALLOC_PURGE_DELAY").is_none() {
            // The documented default of `purge_delay`; no neighbouring option has it.
            assert_eq!(purge_delay(), 1000);
        }
        keep_freed_memory();
        assert_eq!(purge_delay(), -1);
    }
}
