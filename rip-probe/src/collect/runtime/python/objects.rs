//! CPython objects read from outside: types by name, `str` and `int`
//! values, dicts (by `str` key, or every item), an instance's attributes
//! (its managed dict or values), sets, module dicts. What asyncio's tasks
//! and `threading`'s names are found through.

use std::{cell::RefCell, collections::HashSet, io, rc::Rc};

use super::{
    offsets::{Keys, Long, Managed, Offsets},
    string,
};
use crate::collect::memory::Memory;

/// Most entries of a dict or set believed: more is a torn read.
const MAX_DICT: u64 = 1 << 20;
const MAX_SET: u64 = 1 << 27;
/// `PyModuleObject.md_dict`.
pub(super) const MODULE_DICT: u64 = 16;
/// `PyTypeObject.tp_name`, `.tp_base`.
const TYPE_NAME: u64 = 24;
const TYPE_BASE: u64 = 256;
/// `PyTypeObject.tp_basicsize`, `.tp_flags` and the flag (3.13) of
/// types whose instances keep their attributes' values inline.
const TYPE_BASICSIZE: u64 = 32;
const TYPE_FLAGS: u64 = 168;
/// `PyTypeObject.tp_dictoffset`: where an instance's dict pointer is
/// (3.8–3.10; 0 when it has none, negative from the end of a variable
/// size object, which no instance rip reads is).
const TYPE_DICTOFFSET: u64 = 288;
const TPFLAGS_INLINE_VALUES: u64 = 1 << 2;
/// `PySetObject.mask` (`.table` follows).
const SET_MASK: usize = 32;

/// A page of a pass's copy: the buffer it was read into, and where in it.
type Page = (Rc<Vec<u8>>, usize);

/// Pages read in one pass, by address (`None`: unreadable).
type PageCache = foldhash::HashMap<u64, Option<Page>>;

/// Objects of the interpreter read from outside, with caches of what
/// does not change while they are read (types, strings).
pub(super) struct Heap<'a, M: Memory> {
    pub(super) mem: &'a M,
    pub(super) o: &'a Offsets,
    /// Type names by type address (and whether the type is, or derives
    /// from, `_asyncio.Task`).
    types: foldhash::HashMap<u64, (Option<Rc<str>>, bool)>,
    strings: foldhash::HashMap<u64, Option<String>>,
    /// While a pass over many objects runs: the pages it read, by address
    /// (`None`: unreadable), so that objects sharing a page cost one
    /// system call.
    pages: Option<RefCell<PageCache>>,
    /// The pages the latest reads of the pass were served from, by the
    /// page's number modulo [`RECENT`]: a reader of many objects of a few
    /// kinds (tasks, their coroutines, names, futures, each kind laid out
    /// in order) reads from the same few pages again and again.
    recent: RefCell<[Option<(u64, Page)>; RECENT]>,
    /// The buffer of the last bulk read, reused by the next pass's once
    /// the pass it served is over (no fresh memory to fault in).
    spare: RefCell<Option<Rc<Vec<u8>>>>,
    /// While set, the pages each read of the pass touches, in order (a
    /// page read twice in a row once): what a reader of many objects
    /// learns which pages one object depended on from.
    touched: RefCell<Option<Vec<u64>>>,
}

/// The size of the pages a pass caches.
const PAGE: u64 = 4096;
/// Bytes of neighbouring pages read as one region at most.
const MAX_RUN: usize = 1 << 20;
/// Pages read at once when a pass reads a page it has not cached
/// ([`Heap::read_around`]).
const AROUND: u64 = 16;
/// Pages remembered as the latest read from ([`Heap::recent`]).
const RECENT: usize = 64;

/// Where the page holding `addr` is remembered among [`Heap::recent`].
fn slot(addr: u64) -> usize {
    (addr / PAGE) as usize % RECENT
}

/// Bytes a second look reads before comparing them with the first's.
const AGAIN_CHUNK: usize = 4 << 20;

impl<M: Memory> Memory for Heap<'_, M> {
    fn read(&self, addr: u64, buf: &mut [u8]) -> io::Result<()> {
        let Some(pages) = &self.pages else {
            return self.mem.read(addr, buf);
        };
        if let Some(touched) = &mut *self.touched.borrow_mut() {
            let last = addr.wrapping_add(buf.len().max(1) as u64 - 1) & !(PAGE - 1);
            let mut page = addr & !(PAGE - 1);
            loop {
                if touched.last() != Some(&page) {
                    touched.push(page);
                }
                if page >= last {
                    break;
                }
                page += PAGE;
            }
        }
        if let Some((page, (bytes, at))) = &self.recent.borrow()[slot(addr)] {
            let off = addr.wrapping_sub(*page);
            if off < PAGE && off + buf.len() as u64 <= PAGE {
                let off = at + off as usize;
                buf.copy_from_slice(&bytes[off..off + buf.len()]);
                return Ok(());
            }
        }
        let mut pages = pages.borrow_mut();
        let mut done = 0usize;
        while done < buf.len() {
            let at = addr
                .checked_add(done as u64)
                .ok_or_else(|| io::Error::from_raw_os_error(libc::EFAULT))?;
            let page = at & !(PAGE - 1);
            let off = (at - page) as usize;
            let n = (PAGE as usize - off).min(buf.len() - done);
            if !pages.contains_key(&page) {
                self.read_around(&mut pages, page);
            }
            match pages.get(&page).and_then(Option::as_ref) {
                Some((bytes, at)) => {
                    buf[done..done + n].copy_from_slice(&bytes[*at + off..*at + off + n]);
                    self.recent.borrow_mut()[slot(page)] = Some((page, (bytes.clone(), *at)));
                }
                None => return Err(io::Error::from_raw_os_error(libc::EFAULT)),
            }
            done += n;
        }
        Ok(())
    }
}

/// `len` bytes of fresh, zeroed memory for a copy of many pages, asked of
/// the kernel in huge pages where it can: a hundred megabytes of tasks
/// then fault in fifty times, not twenty-five thousand.
fn fresh(len: usize) -> Vec<u8> {
    const HUGE: usize = 2 << 20;
    let mut b = vec![0u8; len];
    let at = b.as_mut_ptr() as usize;
    let (start, end) = (at.next_multiple_of(HUGE), (at + len) / HUGE * HUGE);
    if end > start {
        // SAFETY: the range lies inside `b`, which this function owns; the
        // advice changes how its pages are backed, never their contents
        // (zero until written), and failing is harmless.
        unsafe {
            libc::madvise(start as *mut libc::c_void, end - start, libc::MADV_HUGEPAGE);
        }
    }
    b
}

impl<M: Memory> Heap<'_, M> {
    /// Caches `page`, which the pass has not read yet, and the pages
    /// after it it has not read either, up to [`AROUND`], with one system
    /// call: objects are mostly read in the order they lie in (tasks by
    /// address, then what each points to, allocated in the same order),
    /// so the next objects are on the pages after. The pages before the
    /// first that cannot be read (the end of a mapping) are kept, or
    /// `page` alone where the memory reads all or nothing; `page` itself
    /// unreadable is cached as such.
    fn read_around(&self, pages: &mut PageCache, page: u64) {
        let n = (0..AROUND)
            .take_while(|&i| !pages.contains_key(&(page + i * PAGE)))
            .count()
            .max(1);
        let mut b = vec![0u8; n * PAGE as usize];
        let mut read = self.mem.read_prefix(page, &mut b) / PAGE as usize;
        if read == 0 && n > 1 {
            // Memory that reads all or nothing: the page alone.
            read = usize::from(self.mem.read(page, &mut b[..PAGE as usize]).is_ok());
        }
        if read == 0 {
            pages.insert(page, None);
            return;
        }
        b.truncate(read * PAGE as usize);
        let b = Rc::new(b);
        for i in 0..read {
            let at = i * PAGE as usize;
            pages.insert(page + at as u64, Some((b.clone(), at)));
        }
    }
}

impl<'a, M: Memory> Heap<'a, M> {
    pub(super) fn new(mem: &'a M, o: &'a Offsets) -> Self {
        Heap {
            mem,
            o,
            types: Default::default(),
            strings: Default::default(),
            pages: None,
            recent: RefCell::new(std::array::from_fn(|_| None)),
            spare: RefCell::new(None),
            touched: RefCell::new(None),
        }
    }

    /// Starts a pass: reads go through a fresh cache of pages, one copy of
    /// the process's memory as the pass saw it (`false`: reads go to the
    /// process each time again).
    pub(super) fn pass(&mut self, cached: bool) {
        self.pages = cached.then(|| RefCell::new(PageCache::default()));
        *self.recent.borrow_mut() = std::array::from_fn(|_| None);
    }

    /// Copies the pages holding `regions` into the pass's cache with a
    /// few system calls (neighbouring pages as one region), where reading
    /// them as they are first needed would take one call each; outside a
    /// pass, nothing. A page that cannot be read is cached as such.
    pub(super) fn prefetch(&self, regions: impl IntoIterator<Item = (u64, usize)>) {
        let Some(cache) = &self.pages else { return };
        let mut want: Vec<u64> = {
            let cache = cache.borrow();
            regions
                .into_iter()
                .filter(|&(a, n)| a != 0 && n > 0)
                .flat_map(|(a, n)| {
                    let first = a & !(PAGE - 1);
                    let last = a.saturating_add(n as u64 - 1) & !(PAGE - 1);
                    (0..=(last - first) / PAGE).map(move |i| first + i * PAGE)
                })
                .filter(|p| !cache.contains_key(p))
                .collect()
        };
        self.prefetch_pages(&mut want);
    }

    /// [`Self::prefetch`] of whole pages (sorted and deduplicated here),
    /// into one buffer: each run of neighbouring pages is one region of
    /// one `process_vm_readv`, read straight into its place; a run that
    /// cannot be read whole is read again page by page.
    fn prefetch_pages(&self, want: &mut Vec<u64>) {
        let Some(cache) = &self.pages else { return };
        want.sort_unstable();
        want.dedup();
        if want.is_empty() {
            return;
        }
        let mut runs: Vec<(u64, usize)> = Vec::new();
        for &p in want.iter() {
            match runs.last_mut() {
                Some((start, n)) if *start + *n as u64 == p && *n < MAX_RUN => *n += PAGE as usize,
                _ => runs.push((p, PAGE as usize)),
            }
        }
        let len = want.len() * PAGE as usize;
        // A spare buffer large enough is written over (what a failed read
        // leaves in it is never served: its pages are cached as
        // unreadable); else fresh memory, zeroed by the kernel as it is
        // first written, not by a pass over it before.
        let mut buf = match self
            .spare
            .borrow_mut()
            .take()
            .and_then(|b| Rc::try_unwrap(b).ok())
        {
            Some(mut b) if b.len() >= len => {
                b.truncate(len);
                b
            }
            _ => fresh(len),
        };
        let ok = self.mem.read_scattered(&runs, &mut buf);
        let mut unread = HashSet::new();
        let mut at = 0usize;
        for (i, &(start, n)) in runs.iter().enumerate() {
            if !ok[i] {
                for k in 0..n / PAGE as usize {
                    let page = start + (k * PAGE as usize) as u64;
                    let slot = &mut buf[at + k * PAGE as usize..at + (k + 1) * PAGE as usize];
                    if self.mem.read(page, slot).is_err() {
                        unread.insert(page);
                    }
                }
            }
            at += n;
        }
        let buf = Rc::new(buf);
        let mut cache = cache.borrow_mut();
        for (i, &page) in want.iter().enumerate() {
            let p = (!unread.contains(&page)).then(|| (buf.clone(), i * PAGE as usize));
            cache.insert(page, p);
        }
        *self.spare.borrow_mut() = Some(buf);
    }

    /// Starts or stops recording the pages the pass's reads touch.
    pub(super) fn record(&self, on: bool) {
        *self.touched.borrow_mut() = on.then(Vec::new);
    }

    /// The pages touched since the last call (or since recording
    /// started), in order; empty when not recording.
    pub(super) fn touched(&self) -> impl Iterator<Item = u64> + '_ {
        let pages = self
            .touched
            .borrow_mut()
            .as_mut()
            .map(std::mem::take)
            .unwrap_or_default();
        pages.into_iter()
    }

    /// Starts a cached pass that reads again, at once, every page the
    /// pass before it read: a second look at the same objects, taken
    /// after the first. Says which pages differ from the first look (or
    /// could not be read either time): a reading that touched none of
    /// them would read the same bytes again, and say the same. The pages
    /// are read into one small buffer, a run at a time, and compared with
    /// the first look's; only the pages that differ are kept apart (the
    /// others are the first look's own copy), so the second look costs no
    /// fresh memory.
    pub(super) fn pass_again(&mut self) -> foldhash::HashSet<u64> {
        let before = self
            .pages
            .take()
            .map(RefCell::into_inner)
            .unwrap_or_default();
        let mut pages: Vec<u64> = before.keys().copied().collect();
        pages.sort_unstable();
        self.pass(true);
        let mut cache = PageCache::default();
        cache.reserve(pages.len());
        let mut changed = foldhash::HashSet::default();
        let mut apart: Vec<u8> = Vec::new();
        let mut apart_pages: Vec<u64> = Vec::new();
        let mut scratch = vec![0u8; AGAIN_CHUNK];
        let mut runs: Vec<(u64, usize)> = Vec::new();
        let mut i = 0;
        while i < pages.len() {
            // The runs of neighbouring pages that fill the buffer once.
            runs.clear();
            let mut len = 0usize;
            while i < pages.len() && len + (PAGE as usize) <= AGAIN_CHUNK {
                let p = pages[i];
                match runs.last_mut() {
                    Some((start, n)) if *start + *n as u64 == p && *n < MAX_RUN => {
                        *n += PAGE as usize;
                    }
                    _ => runs.push((p, PAGE as usize)),
                }
                len += PAGE as usize;
                i += 1;
            }
            let ok = self.mem.read_scattered(&runs, &mut scratch[..len]);
            let mut at = 0usize;
            for (&(start, n), ok) in runs.iter().zip(ok) {
                for k in 0..n / PAGE as usize {
                    let page = start + (k * PAGE as usize) as u64;
                    let now = &mut scratch[at..at + PAGE as usize];
                    at += PAGE as usize;
                    let read = ok || self.mem.read(page, now).is_ok();
                    let first = before.get(&page).and_then(|p| p.as_ref());
                    match (read, first) {
                        (true, Some((bytes, off))) if bytes[*off..*off + PAGE as usize] == *now => {
                            cache.insert(page, Some((bytes.clone(), *off)));
                        }
                        (true, _) => {
                            changed.insert(page);
                            apart_pages.push(page);
                            apart.extend_from_slice(now);
                        }
                        (false, _) => {
                            changed.insert(page);
                            cache.insert(page, None);
                        }
                    }
                }
            }
        }
        let apart = Rc::new(apart);
        for (k, page) in apart_pages.into_iter().enumerate() {
            cache.insert(page, Some((apart.clone(), k * PAGE as usize)));
        }
        self.pages = Some(RefCell::new(cache));
        changed
    }

    /// The value of the non-negative `int` at `obj`, when it fits 64 bits.
    pub(super) fn int(&mut self, obj: u64) -> Option<u64> {
        let mut b = [0u8; 40];
        self.read(obj, &mut b[..28]).ok()?;
        let size = i64::from_le_bytes(b[16..24].try_into().ok()?);
        let digits = match self.o.objects.long {
            Long::Size if size >= 0 => size as u64,
            Long::Tag if size & 3 != 2 => (size as u64) >> 3,
            _ => return None,
        };
        if digits > 3 {
            return None;
        }
        if digits > 1 {
            self.read(obj + 24, &mut b[24..24 + 4 * digits as usize])
                .ok()?;
        }
        let mut n: u128 = 0;
        for d in (0..digits as usize).rev() {
            let at = 24 + 4 * d;
            let digit = u32::from_le_bytes(b[at..at + 4].try_into().ok()?);
            n = (n << 30) | u128::from(digit & 0x3fff_ffff);
        }
        u64::try_from(n).ok()
    }

    /// Every item of the dict at `dict`: (key, value).
    pub(super) fn dict_items(&mut self, dict: u64) -> Option<Vec<(u64, u64)>> {
        let mut d = [0u8; 48];
        self.read(dict, &mut d).ok()?;
        let keys = u64::from_le_bytes(d[32..40].try_into().ok()?);
        let values = u64::from_le_bytes(d[40..48].try_into().ok()?);
        let entries = self.entries(keys)?;
        let mut out = Vec::new();
        for (i, (k, v)) in entries.into_iter().enumerate() {
            let v = if values == 0 {
                v
            } else {
                let at = values + self.o.objects.dict_values_at;
                self.word(at + 8 * i as u64).unwrap_or(0)
            };
            if k != 0 && v != 0 {
                out.push((k, v));
            }
        }
        Some(out)
    }

    /// The entries of the dict keys at `keys`: (key, value), the value 0
    /// in a split table (the values are apart).
    fn entries(&mut self, keys: u64) -> Option<Vec<(u64, u64)>> {
        if self.o.objects.keys == Keys::Sized {
            return self.sized_entries(keys);
        }
        let mut k = [0u8; 32];
        self.read(keys, &mut k).ok()?;
        let (index_bytes, kind) = (k[9], k[10]);
        let n = u64::from_le_bytes(k[24..32].try_into().ok()?);
        if index_bytes > 32 || n > MAX_DICT {
            return None;
        }
        // DICT_KEYS_GENERAL (hash, key, value), else (key, value).
        let (size, key_at) = if kind == 0 { (24, 8) } else { (16, 0) };
        let mut entries = vec![0u8; (n * size) as usize];
        self.read(keys + 32 + (1u64 << index_bytes), &mut entries)
            .ok()?;
        Some(
            entries
                .chunks_exact(size as usize)
                .map(|e| {
                    let at =
                        |off: usize| u64::from_le_bytes(e[off..off + 8].try_into().expect("8"));
                    (at(key_at), at(key_at + 8))
                })
                .collect(),
        )
    }

    /// The entries of 3.8–3.10's dict keys at `keys`: (key, value), the
    /// value 0 in a split table.
    fn sized_entries(&mut self, keys: u64) -> Option<Vec<(u64, u64)>> {
        let mut k = [0u8; 40];
        self.read(keys, &mut k).ok()?;
        let size = u64::from_le_bytes(k[8..16].try_into().ok()?);
        let n = u64::from_le_bytes(k[32..40].try_into().ok()?);
        if !size.is_power_of_two() || size > 2 * MAX_DICT || n > size {
            return None;
        }
        // DK_IXSIZE: the width of one index.
        let width = match size {
            0..=0xff => 1,
            0x100..=0xffff => 2,
            0x1_0000..=0xffff_ffff => 4,
            _ => 8,
        };
        let mut entries = vec![0u8; (n * 24) as usize];
        self.read(keys + 40 + size * width, &mut entries).ok()?;
        Some(
            entries
                .chunks_exact(24)
                .map(|e| {
                    let at =
                        |off: usize| u64::from_le_bytes(e[off..off + 8].try_into().expect("8"));
                    (at(8), at(16))
                })
                .collect(),
        )
    }

    pub(super) fn string(&mut self, obj: u64) -> Option<String> {
        if let Some(s) = self.strings.get(&obj) {
            return s.clone();
        }
        let s = string(self, self.o, obj);
        self.strings.insert(obj, s.clone());
        s
    }

    pub(super) fn word(&self, addr: u64) -> Option<u64> {
        self.read_u64(addr).ok().filter(|&w| w != 0)
    }

    /// The name of `obj`'s type (`tp_name`).
    pub(super) fn type_name(&mut self, obj: u64) -> Option<String> {
        self.type_of(obj).map(|(_, n)| n.to_string())
    }

    /// `obj`'s type: its address and name (shared, not copied).
    pub(super) fn type_of(&mut self, obj: u64) -> Option<(u64, Rc<str>)> {
        let ty = self.word(obj.wrapping_add(8))?;
        Some((ty, self.type_info(ty).0?))
    }

    /// Whether `obj` is an `_asyncio.Task` (or of a class derived from it).
    pub(super) fn is_task(&mut self, obj: u64) -> bool {
        self.word(obj.wrapping_add(8))
            .is_some_and(|ty| self.type_info(ty).1)
    }

    pub(super) fn type_info(&mut self, ty: u64) -> (Option<Rc<str>>, bool) {
        if let Some(t) = self.types.get(&ty) {
            return t.clone();
        }
        let name: Option<Rc<str>> = self.c_string(ty).map(Into::into);
        let mut task = name.as_deref() == Some("_asyncio.Task");
        let mut base = ty;
        for _ in 0..16 {
            if task {
                break;
            }
            let Some(b) = self.word(base.wrapping_add(TYPE_BASE)) else {
                break;
            };
            task = self.c_string(b).as_deref() == Some("_asyncio.Task");
            base = b;
        }
        self.types.insert(ty, (name.clone(), task));
        (name, task)
    }

    /// The type's `tp_name`.
    pub(super) fn c_string(&self, ty: u64) -> Option<String> {
        let at = self.word(ty.wrapping_add(TYPE_NAME))?;
        let mut b = [0u8; 64];
        // A name near the end of a mapping: read less.
        let n = [64usize, 32, 16]
            .into_iter()
            .find(|&n| self.read(at, &mut b[..n]).is_ok())?;
        let end = b[..n].iter().position(|&c| c == 0)?;
        String::from_utf8(b[..end].to_vec()).ok()
    }

    /// The value of the `str` key `key` in the dict at `dict`.
    pub(super) fn dict_get(&mut self, dict: u64, key: &str) -> Option<u64> {
        let mut d = [0u8; 48];
        self.read(dict, &mut d).ok()?;
        let keys = u64::from_le_bytes(d[32..40].try_into().ok()?);
        let values = u64::from_le_bytes(d[40..48].try_into().ok()?);
        let ix = self.key_index(keys, key)?;
        match ix {
            (_, Some(v)) if values == 0 => Some(v).filter(|&v| v != 0),
            (i, _) => self.word(values + self.o.objects.dict_values_at + 8 * i),
        }
    }

    /// Where `key` is in the dict keys at `keys`: its entry's index and,
    /// for a combined table, its value.
    pub(super) fn key_index(&mut self, keys: u64, key: &str) -> Option<(u64, Option<u64>)> {
        let entries = self.entries(keys)?;
        entries.into_iter().enumerate().find_map(|(i, (k, v))| {
            (k != 0 && self.string(k).as_deref() == Some(key)).then_some((i as u64, Some(v)))
        })
    }

    /// The attribute `name` of an instance of a class with a managed dict.
    pub(super) fn attribute(&mut self, obj: u64, name: &str) -> Option<u64> {
        let (values, dict) = match self.o.objects.managed {
            Managed::Split => (
                self.read_u64(obj.wrapping_sub(32)).ok()?,
                self.read_u64(obj.wrapping_sub(24)).ok()?,
            ),
            Managed::Tagged => {
                let w = self.read_u64(obj.wrapping_sub(24)).ok()?;
                if w & 1 == 1 {
                    (w.wrapping_add(1), 0)
                } else {
                    (0, w)
                }
            }
            Managed::DictOffset => {
                let ty = self.word(obj.wrapping_add(8))?;
                let at = i64::from_le_bytes({
                    let mut b = [0u8; 8];
                    self.read(ty.wrapping_add(TYPE_DICTOFFSET), &mut b).ok()?;
                    b
                });
                if at <= 0 {
                    return None;
                }
                (0, self.read_u64(obj.wrapping_add(at as u64)).ok()?)
            }
            Managed::Inline => {
                let ty = self.word(obj.wrapping_add(8))?;
                let flags = self.read_u64(ty.wrapping_add(TYPE_FLAGS)).ok()?;
                let dict = self.read_u64(obj.wrapping_sub(24)).ok()?;
                let mut values = 0;
                if flags & TPFLAGS_INLINE_VALUES != 0 {
                    let at = obj.wrapping_add(self.read_u64(ty.wrapping_add(TYPE_BASICSIZE)).ok()?);
                    let mut head = [0u8; 4];
                    self.read(at, &mut head).ok()?;
                    // `valid`: the values are the instance's (else its dict).
                    if head[3] != 0 {
                        values = at.wrapping_add(8);
                    }
                }
                (values, if values == 0 { dict } else { 0 })
            }
        };
        if values != 0 {
            let ty = self.word(obj.wrapping_add(8))?;
            let keys = self.word(ty.wrapping_add(self.o.objects.type_cached_keys))?;
            let (i, _) = self.key_index(keys, name)?;
            return self.word(values.wrapping_add(8 * i));
        }
        if dict != 0 {
            return self.dict_get(dict, name);
        }
        None
    }

    /// The members of the `set` at `set`.
    pub(super) fn set_members(&mut self, set: u64) -> Option<Vec<u64>> {
        let mut h = [0u8; 48];
        self.read(set, &mut h).ok()?;
        let mask = u64::from_le_bytes(h[SET_MASK..SET_MASK + 8].try_into().ok()?);
        let table = u64::from_le_bytes(h[40..48].try_into().ok()?);
        if mask >= MAX_SET {
            return None;
        }
        let mut entries = vec![0u8; ((mask + 1) * 16) as usize];
        // A set of many members: its table's pages copied at once.
        self.prefetch([(table, entries.len())]);
        self.read(table, &mut entries).ok()?;
        Some(
            entries
                .chunks_exact(16)
                .filter_map(|e| {
                    let key = u64::from_le_bytes(e[..8].try_into().expect("8"));
                    let hash = i64::from_le_bytes(e[8..].try_into().expect("8"));
                    // Empty, or the dummy of a removed member.
                    (key != 0 && hash != -1).then_some(key)
                })
                .collect(),
        )
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    /// Pages of memory a test changes between two looks (elsewhere
    /// unreadable).
    struct Pages(RefCell<HashMap<u64, Vec<u8>>>);

    impl Memory for Pages {
        fn read(&self, addr: u64, buf: &mut [u8]) -> io::Result<()> {
            let pages = self.0.borrow();
            for (i, b) in buf.iter_mut().enumerate() {
                let at = addr + i as u64;
                let page = pages
                    .get(&(at & !(PAGE - 1)))
                    .ok_or_else(|| io::Error::from_raw_os_error(libc::EFAULT))?;
                *b = page[(at % PAGE) as usize];
            }
            Ok(())
        }
    }

    const BASE: u64 = 0x10_000;

    fn page(i: u64) -> u64 {
        BASE + i * PAGE
    }

    /// The second look names exactly the pages whose bytes changed or
    /// could not be read, serves those as they are now and the others as
    /// the first look copied them; and the pages each read touched are
    /// told in order, a read across two pages naming both.
    #[test]
    fn a_second_look_names_the_pages_that_changed_and_reads_them_anew() {
        let mem = Pages(RefCell::new(
            (0..4)
                .map(|i| (page(i), vec![i as u8; PAGE as usize]))
                .collect(),
        ));
        let o = super::super::offsets::for_version(3, 11).expect("3.11's offsets");
        let mut heap = Heap::new(&mem, &o);
        heap.pass(true);
        // Pages 0 to 2 copied at once; page 3 when first read.
        heap.prefetch([(BASE, 3 * PAGE as usize)]);
        heap.record(true);
        assert_eq!(heap.read_u64(page(1) - 4).ok(), Some(0x0101_0101_0000_0000));
        assert_eq!(heap.read_u64(page(3)).ok(), Some(0x0303_0303_0303_0303));
        assert_eq!(
            heap.touched().collect::<Vec<_>>(),
            [page(0), page(1), page(3)]
        );
        assert_eq!(heap.read_u64(page(2)).ok(), Some(0x0202_0202_0202_0202));
        assert_eq!(heap.touched().collect::<Vec<_>>(), [page(2)]);
        heap.record(false);
        // Page 1 changes, page 2 is unmapped, pages 0 and 3 stay.
        mem.0.borrow_mut().get_mut(&page(1)).expect("page 1")[8] = 0xff;
        mem.0.borrow_mut().remove(&page(2));
        let mut changed: Vec<u64> = heap.pass_again().into_iter().collect();
        changed.sort_unstable();
        assert_eq!(changed, [page(1), page(2)]);
        // The second look is a copy too: page 0, changed after it, is
        // served as it was.
        mem.0.borrow_mut().get_mut(&page(0)).expect("page 0")[0] = 7;
        let mut b = [0u8; 1];
        heap.read(page(0), &mut b).expect("page 0");
        assert_eq!(b, [0]);
        heap.read(page(1) + 8, &mut b).expect("page 1");
        assert_eq!(b, [0xff]);
        assert!(heap.read(page(2), &mut b).is_err());
        heap.read(page(3), &mut b).expect("page 3");
        assert_eq!(b, [3]);
        // Nothing is recorded once recording stops.
        assert_eq!(heap.touched().count(), 0);
    }
}
