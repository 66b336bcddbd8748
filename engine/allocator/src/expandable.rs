//! An expandable segment: a reserved virtual range of a whole number of pages
//! (2 MiB for the small pool, 20 MiB for the large), of which pages are mapped
//! on demand (PyTorch's `ExpandableSegment`).

use super::raw::{RawAllocator, RawError};

#[derive(Debug)]
pub(crate) struct ExpandableSegment {
    base: u64,
    page: u64,
    /// Whether each page is mapped; trailing unmapped pages are trimmed.
    pages: Vec<bool>,
    max_pages: u64,
}

impl ExpandableSegment {
    /// Reserves address space for `address_space` bytes (rounded up to pages).
    pub(crate) fn reserve(raw: &dyn RawAllocator, page: u64, address_space: u64) -> Result<Self, RawError> {
        let max_pages = address_space.div_ceil(page).max(1);
        let base = raw.reserve_address_space(max_pages * page)?;
        Ok(ExpandableSegment { base, page, pages: Vec::new(), max_pages })
    }

    pub(crate) fn base(&self) -> u64 {
        self.base
    }

    /// The whole reserved range in bytes.
    pub(crate) fn size(&self) -> u64 {
        self.max_pages * self.page
    }

    /// Maps the pages covering `[addr, addr + size)`; `addr` is page aligned.
    /// Returns the bytes mapped (a whole number of pages, at least `size`), or
    /// `None` when the device has no memory for them.
    pub(crate) fn map(&mut self, raw: &dyn RawAllocator, addr: u64, size: u64) -> Result<Option<u64>, RawError> {
        let begin = (addr - self.base) / self.page;
        let end = (addr + size - self.base).div_ceil(self.page);
        debug_assert_eq!(self.base + begin * self.page, addr, "map must start on a page");
        if begin == end {
            return Ok(None);
        }
        match raw.map(self.base + begin * self.page, (end - begin) * self.page) {
            Ok(()) => {}
            Err(RawError::OutOfMemory) => return Ok(None),
            Err(e) => return Err(e),
        }
        if self.pages.len() < end as usize {
            self.pages.resize(end as usize, false);
        }
        for p in &mut self.pages[begin as usize..end as usize] {
            debug_assert!(!*p, "page mapped twice");
            *p = true;
        }
        Ok(Some((end - begin) * self.page))
    }

    /// Unmaps the whole pages inside `[addr, addr + size)`. Returns the range
    /// unmapped, or `None` when it holds no whole page.
    pub(crate) fn unmap(&mut self, raw: &dyn RawAllocator, addr: u64, size: u64) -> Option<(u64, u64)> {
        let begin = (addr - self.base).div_ceil(self.page);
        let end = (addr + size - self.base) / self.page;
        if begin >= end {
            return None;
        }
        let start = self.base + begin * self.page;
        let len = (end - begin) * self.page;
        raw.unmap(start, len);
        for p in &mut self.pages[begin as usize..end as usize] {
            *p = false;
        }
        while self.pages.last() == Some(&false) {
            self.pages.pop();
        }
        Some((start, len))
    }

    /// Unmaps every mapped page and gives the address range back.
    pub(crate) fn release_all(&mut self, raw: &dyn RawAllocator) {
        let mut i = 0;
        while i < self.pages.len() {
            if self.pages[i] {
                let start = i;
                while i < self.pages.len() && self.pages[i] {
                    i += 1;
                }
                raw.unmap(self.base + start as u64 * self.page, (i - start) as u64 * self.page);
            } else {
                i += 1;
            }
        }
        self.pages.clear();
        raw.release_address_space(self.base, self.size());
    }
}
