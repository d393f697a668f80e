//! The `.gopclntab` reader as the function table the Go runtime's reader
//! in collect needs (a stripped binary's roots, frame sizes to unwind
//! goroutines): collect names the seam, symbolize provides it.

use crate::{collect::runtime::go::FuncTable, symbolize::gopclntab::GoBinary};

impl FuncTable for GoBinary {
    fn func_range(&self, name: &str) -> Option<(u64, u64)> {
        self.func_by_name(name).map(|f| (f.entry, f.end))
    }

    fn func_name(&self, pc: u64) -> Option<String> {
        self.func_at(pc).map(|f| f.name)
    }

    fn sp_delta(&self, pc: u64) -> Option<i32> {
        GoBinary::sp_delta(self, pc)
    }
}
