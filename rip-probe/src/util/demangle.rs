//! Symbol names demangled one way everywhere: lock and data names as the
//! stacks' functions (blazesym demangles those the same way: Rust first,
//! without the hash, then C++), so a lock reads the same in LOCKS as in a
//! stack.

use std::borrow::Cow;

/// `name` demangled as Rust (legacy or v0, without the hash) or C++
/// (Itanium), or as it is when it is neither.
pub(crate) fn demangle(name: &str) -> Cow<'_, str> {
    if let Ok(d) = rustc_demangle::try_demangle(name) {
        return Cow::Owned(format!("{d:#}"));
    }
    cpp_demangle::Symbol::new(name)
        .ok()
        .and_then(|s| s.demangle().ok())
        .map_or(Cow::Borrowed(name), Cow::Owned)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rust_and_cpp_names_demangle_and_others_stay() {
        assert_eq!(
            demangle("_ZN4core3ptr13drop_in_place17h0123456789abcdefE"),
            "core::ptr::drop_in_place"
        );
        assert_eq!(demangle("_ZN7mariadb9LOCK_openE"), "mariadb::LOCK_open");
        assert_eq!(demangle("_ZL11g_pool_lock"), "g_pool_lock");
        assert_eq!(demangle("g_table_lock"), "g_table_lock");
        assert_eq!(demangle("runtime.sched"), "runtime.sched");
    }
}
