//! TEMP-PLACEHOLDER
use super::RingView;
use crate::error::Error;
use std::path::{Path, PathBuf};
impl RingView {
    /// placeholder
    pub fn open(_path: &Path) -> Result<Self, Error> {
        Err(Error::Usage("TEMP".into()))
    }
    /// placeholder
    pub fn find(_pid: u32) -> Result<Vec<PathBuf>, Error> {
        Ok(Vec::new())
    }
}
