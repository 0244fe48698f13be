//! The live windows of a time-windowed aggregation: one open-addressing
//! hash table of keys per window start.
//!
//! Time windows close in start order, so a table per start makes closing a
//! window a matter of dropping its whole table (recycled for a later start):
//! no deletions, no tombstones, no long probe sequences. A record looks up
//! the table of each of its windows (a short list searched from the
//! newest), then its key there. A slot holds the key (inline when at most
//! [`INLINE_KEY`] bytes), the state and the result timestamp: half a cache
//! line for states of up to 8 bytes (count, sum, min, max), a whole one
//! for larger ones. Probes walk a byte array of tag fingerprints, small
//! enough to stay in cache, 16 bytes at a time ([`Group`]), and read the
//! one slot whose fingerprint matches; that slot is prefetched a few
//! records ahead, which is what makes a batch over many keys run at
//! memory-parallel speed. Large slot arrays sit on huge pages
//! ([`super::huge`]).

use std::hash::BuildHasher;

use super::huge::HugeArray;
use super::keys::FastState;

/// Keys up to this many bytes are stored in the slot itself (the 16th byte
/// holds the key's length and the slot's dirty flag).
pub(crate) const INLINE_KEY: usize = 15;

/// The last key byte of a slot, and of a probe's second word: the key's
/// length, or [`LONG`]; in a slot, [`DIRTY`] as well.
const META: usize = 15;
/// The length byte of a key longer than [`INLINE_KEY`] (kept in the
/// table's long keys, the slot's first word its index).
const LONG: u8 = 0x40;
/// Set in a slot's length byte while its window changed since the last
/// drain of store changes.
const DIRTY: u8 = 0x80;

/// Control bytes compared at once: a probe reads the 16 bytes from its
/// position (the first 16 are mirrored past the end, so a group never wraps).
const GROUP: usize = 16;

/// Set in every live tag.
const LIVE: u64 = 1 << 63;
/// The control byte of an empty slot.
const EMPTY_BYTE: u8 = 0;

/// The control byte of a slot holding `tag`: hash bits that the slot index
/// (the low bits) does not use; never [`EMPTY_BYTE`].
#[inline]
fn fingerprint(tag: u64) -> u8 {
    (tag >> 48) as u8 | 1
}

/// The [`GROUP`] control bytes from one position, as bit masks (bit `b`
/// for the byte at position + `b`): which hold a fingerprint, which are
/// empty. A linear probe's path is the same as a byte-by-byte walk; it just
/// skips the bytes that can neither match nor end it in one step.
struct Group {
    matches: u32,
    empties: u32,
}

impl Group {
    #[inline(always)]
    #[allow(
        clippy::inline_always,
        reason = "hot per-record path: measured, the calls were not inlined"
    )]
    fn load(ctrl: &[u8], at: usize, fp: u8) -> Self {
        let bytes: &[u8; GROUP] = ctrl[at..at + GROUP].try_into().expect("a whole group");
        #[cfg(target_arch = "x86_64")]
        {
            use core::arch::x86_64::{
                __m128i, _mm_cmpeq_epi8, _mm_loadu_si128, _mm_movemask_epi8, _mm_set1_epi8,
                _mm_setzero_si128,
            };
            // SAFETY: SSE2 is part of the x86_64 baseline; the load reads
            // the 16 bytes of `bytes` (unaligned loads allow any address).
            #[allow(
                clippy::cast_ptr_alignment,
                reason = "_mm_loadu_si128 reads from any alignment"
            )]
            unsafe {
                let g = _mm_loadu_si128(bytes.as_ptr().cast::<__m128i>());
                let matches = _mm_movemask_epi8(_mm_cmpeq_epi8(g, _mm_set1_epi8(fp as i8)));
                let empties = _mm_movemask_epi8(_mm_cmpeq_epi8(g, _mm_setzero_si128()));
                Self {
                    matches: matches as u32,
                    empties: empties as u32,
                }
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            let (mut matches, mut empties) = (0, 0);
            for (b, &c) in bytes.iter().enumerate() {
                matches |= u32::from(c == fp) << b;
                empties |= u32::from(c == EMPTY_BYTE) << b;
            }
            Self { matches, empties }
        }
    }

    /// The matches before the first empty byte (past it, the probe ends).
    #[inline]
    fn candidates(&self) -> u32 {
        self.matches & self.empties.wrapping_sub(1) & !self.empties
    }
}

/// One window of one key: 32 bytes (two per cache line) with a state of
/// up to 8 bytes, 64 with up to 40 (the slot arrays of large tables start
/// on a page, so none of their slots straddles two lines; a small table's
/// array on the heap is only 32-byte aligned). No hash is kept: the
/// fingerprint rejects most other keys, and growth hashes the keys again.
#[derive(Clone, Copy, Default)]
#[repr(C, align(32))]
pub(crate) struct Slot<S> {
    /// The key's bytes zero-padded (a long key: its index in the table's
    /// long keys), then its length byte (see [`META`]).
    key: [u8; 16],
    pub timestamp: i64,
    pub state: S,
}

impl<S> Slot<S> {
    /// Changed since the last drain of store changes.
    #[inline]
    pub fn is_dirty(&self) -> bool {
        self.key[META] & DIRTY != 0
    }

    #[inline]
    pub fn clear_dirty(&mut self) {
        self.key[META] &= !DIRTY;
    }

    #[inline]
    fn words(&self) -> [u64; 2] {
        [
            load8(&self.key, 0),
            load8(&self.key, 8) & !(u64::from(DIRTY) << 56),
        ]
    }
}

/// The keys of one window start.
pub(crate) struct StartTable<S> {
    pub start: i64,
    /// One byte per slot: [`EMPTY_BYTE`], or a fingerprint of the slot's
    /// tag ([`fingerprint`]), then a copy of the first [`GROUP`] bytes.
    /// Probes walk these bytes (a table of 100,000 keys has 128 KiB of
    /// them, which stay in cache) and read a slot only when its fingerprint
    /// matches, so a lookup reads one slot line, and a prefetch can fetch
    /// exactly that line.
    ctrl: Vec<u8>,
    /// Slots whose control byte is [`EMPTY_BYTE`] hold stale data.
    slots: HugeArray<Slot<S>>,
    long_keys: Vec<Box<[u8]>>,
    mask: usize,
    len: usize,
    /// The length at which the table doubles (4/5 of its capacity).
    grow_at: usize,
    /// Slots whose `dirty` flag was set since the last drain.
    pub dirty: Vec<u32>,
    /// Changes whenever slots move or empty (growth, reuse for another
    /// start): a [`Hint`] taken under another generation is ignored.
    generation: u64,
    /// The keys' tags, for growth: [`key_tag`] with the tables' seed (tests
    /// give colliding keys tags of their own).
    tag_of: fn(u64, &[u8]) -> u64,
    seed: u64,
}

/// Where a prefetch found a key's probe to end: the first slot on its path
/// whose control byte matched the fingerprint or was empty. Tables never
/// delete a slot within a generation, so when the record gets to it, that
/// slot is still the key's (tag and key equal), or, still empty, where the
/// key goes; either way the probe is not walked again.
#[derive(Clone, Copy)]
pub(crate) struct Hint {
    generation: u64,
    at: u32,
}

impl Hint {
    /// No hint: no table has this generation.
    pub const NONE: Self = Self {
        generation: u64::MAX,
        at: 0,
    };
}

/// A key prepared for probing: its tag, and the first 16 bytes of its
/// slot as two little-endian words (a short key's bytes zero-padded and
/// its length), so slots compare it in two steps.
#[derive(Clone, Copy, Default)]
pub(crate) struct Probe {
    pub tag: u64,
    pub words: [u64; 2],
}

impl Probe {
    /// `key` prepared for probing under a tag of the caller's.
    #[cfg(test)]
    pub fn with_tag(key: &[u8], tag: u64) -> Self {
        Self {
            tag,
            words: slot_words(key),
        }
    }

    #[inline]
    fn is_long(&self) -> bool {
        self.words[1] >> 56 == u64::from(LONG)
    }
}

/// The first 16 bytes of `key`'s slot as two words, the index of a long
/// key left 0.
#[inline(always)]
#[allow(
    clippy::inline_always,
    reason = "hot per-record path: measured, the calls were not inlined"
)]
fn slot_words(key: &[u8]) -> [u64; 2] {
    if key.len() <= INLINE_KEY {
        let [low, high] = short_key_words(key);
        [low, high | (key.len() as u64) << 56]
    } else {
        [0, u64::from(LONG) << 56]
    }
}

#[inline]
fn load8(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}

#[inline]
fn load4(b: &[u8], at: usize) -> u64 {
    u64::from(u32::from_le_bytes(
        b[at..at + 4].try_into().expect("4 bytes"),
    ))
}

/// The bytes of a key of at most 15 bytes as two zero-padded little-endian
/// words, read with (overlapping) whole-word loads rather than a byte copy:
/// the copy's narrow stores would stall the wide loads that follow.
#[inline(always)]
#[allow(
    clippy::inline_always,
    reason = "hot per-record path: measured, the calls were not inlined"
)]
fn short_key_words(key: &[u8]) -> [u64; 2] {
    let n = key.len();
    debug_assert!(n <= INLINE_KEY);
    if n >= 8 {
        let high = if n > 8 {
            load8(key, n - 8) >> ((16 - n) * 8)
        } else {
            0
        };
        [load8(key, 0), high]
    } else if n >= 4 {
        let high = load4(key, n - 4) >> ((8 - n) * 8);
        [load4(key, 0) | (high << 32), 0]
    } else {
        let mut w = 0;
        for (i, &b) in key.iter().enumerate() {
            w |= u64::from(b) << (8 * i);
        }
        [w, 0]
    }
}

const HASH_K: u64 = 0xf135_7aea_2e62_a9c5;

#[inline]
fn mix(h: u64, word: u64) -> u64 {
    (h.rotate_left(26) ^ word).wrapping_mul(HASH_K)
}

#[inline]
fn finish(h: u64) -> u64 {
    (h ^ (h >> 29)).wrapping_mul(0xbf58_476d_1ce4_e5b9) ^ (h >> 32)
}

/// The tag of `key` under `seed`: its hash with the live bit set. A short
/// key hashes its slot words (its length among them) in one pass.
#[inline(always)]
#[allow(
    clippy::inline_always,
    reason = "hot per-record path: measured, the calls were not inlined"
)]
fn tag_with(seed: u64, key: &[u8], words: [u64; 2]) -> u64 {
    let n = key.len();
    let h = if n <= INLINE_KEY {
        mix(mix(seed, words[0]), words[1])
    } else {
        let mut h = seed;
        let mut at = 0;
        while at + 8 <= n {
            h = mix(h, load8(key, at));
            at += 8;
        }
        if at < n {
            // The last word overlaps the one before.
            h = mix(h, load8(key, n - 8));
        }
        mix(h, n as u64)
    };
    finish(h) | LIVE
}

/// The tag of `key` under `seed` (see [`Tables::probe`]).
fn key_tag(seed: u64, key: &[u8]) -> u64 {
    tag_with(seed, key, slot_words(key))
}

/// What [`StartTable::upsert`] found.
pub(crate) enum Upsert {
    Found(u32),
    Created(u32),
}

impl<S: Copy + Default> StartTable<S> {
    fn with_capacity(start: i64, capacity: usize, seed: u64) -> Self {
        let capacity = capacity.next_power_of_two().max(GROUP);
        Self {
            start,
            ctrl: vec![EMPTY_BYTE; capacity + GROUP],
            slots: HugeArray::filled(capacity, Slot::default()),
            long_keys: Vec::new(),
            mask: capacity - 1,
            len: 0,
            grow_at: capacity / 5 * 4,
            dirty: Vec::new(),
            generation: 0,
            tag_of: key_tag,
            seed,
        }
    }

    /// Empties the table for another start, keeping its allocation.
    fn reset(&mut self, start: i64) {
        self.start = start;
        self.ctrl.fill(EMPTY_BYTE);
        self.long_keys.clear();
        self.len = 0;
        self.dirty.clear();
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub(crate) fn capacity(&self) -> usize {
        self.slots.len()
    }

    /// Sets slot `i`'s control byte (and its mirror past the end).
    #[inline]
    fn set_ctrl(&mut self, i: usize, c: u8) {
        self.ctrl[i] = c;
        if i < GROUP {
            self.ctrl[self.mask + 1 + i] = c;
        }
    }

    /// Prefetches the slot that a lookup of `tag` will read: the first
    /// one on its probe path whose control byte matches (its slot), or is
    /// empty (where it will be created).
    #[inline]
    fn prefetch(&self, tag: u64) -> Hint {
        let fp = fingerprint(tag);
        let mut i = tag as usize & self.mask;
        loop {
            let g = Group::load(&self.ctrl, i, fp);
            let hits = g.matches | g.empties;
            if hits != 0 {
                let at = (i + hits.trailing_zeros() as usize) & self.mask;
                prefetch_read(self.slots.as_ptr().wrapping_add(at).cast());
                return Hint {
                    generation: self.generation,
                    at: at as u32,
                };
            }
            i = (i + GROUP) & self.mask;
        }
    }

    /// Prefetches the control bytes that a lookup (or a [`Self::prefetch`])
    /// of `tag` reads first: with several large tables live they no longer
    /// stay in cache, and the slot prefetch would wait for them.
    #[inline]
    fn prefetch_ctrl(&self, tag: u64) {
        let at = self.ctrl.as_ptr().wrapping_add(tag as usize & self.mask);
        prefetch_read(at.cast());
        prefetch_read(at.wrapping_add(GROUP - 1).cast());
    }

    #[inline]
    fn key_eq(&self, slot: &Slot<S>, key: &[u8], probe: &Probe) -> bool {
        let [low, high] = slot.words();
        if high != probe.words[1] {
            return false;
        }
        if probe.is_long() {
            *self.long_keys[low as usize] == *key
        } else {
            low == probe.words[0]
        }
    }

    /// The slot of `key` (prepared as `probe`), created with a default
    /// state if absent.
    #[inline(always)]
    #[allow(
        clippy::inline_always,
        reason = "hot per-record path: measured, the calls were not inlined"
    )]
    pub fn upsert(&mut self, key: &[u8], probe: &Probe) -> Upsert {
        self.upsert_hinted(key, probe, Hint::NONE)
    }

    /// [`StartTable::upsert`], starting from where a prefetch of the same
    /// key found its probe to end (see [`Hint`]).
    #[inline(always)]
    #[allow(
        clippy::inline_always,
        reason = "hot per-record path: measured, the calls were not inlined"
    )]
    pub fn upsert_hinted(&mut self, key: &[u8], probe: &Probe, hint: Hint) -> Upsert {
        let tag = probe.tag;
        if self.len >= self.grow_at {
            self.grow();
        }
        let fp = fingerprint(tag);
        if hint.generation == self.generation {
            let at = hint.at as usize;
            let c = self.ctrl[at];
            if c == EMPTY_BYTE {
                return self.insert_at(at, key, probe);
            }
            if c == fp && self.key_eq(&self.slots[at], key, probe) {
                return Upsert::Found(hint.at);
            }
        }
        let mut i = tag as usize & self.mask;
        loop {
            let g = Group::load(&self.ctrl, i, fp);
            let mut candidates = g.candidates();
            while candidates != 0 {
                let at = (i + candidates.trailing_zeros() as usize) & self.mask;
                if self.key_eq(&self.slots[at], key, probe) {
                    return Upsert::Found(at as u32);
                }
                candidates &= candidates - 1;
            }
            if g.empties != 0 {
                i = (i + g.empties.trailing_zeros() as usize) & self.mask;
                break;
            }
            i = (i + GROUP) & self.mask;
        }
        self.insert_at(i, key, probe)
    }

    /// Puts `key` in empty slot `i`, the end of its probe.
    #[inline]
    fn insert_at(&mut self, i: usize, key: &[u8], probe: &Probe) -> Upsert {
        let mut low = probe.words[0];
        if probe.is_long() {
            low = self.long_keys.len() as u64;
            self.long_keys.push(key.into());
        }
        let mut slot_key = [0; 16];
        slot_key[..8].copy_from_slice(&low.to_le_bytes());
        slot_key[8..].copy_from_slice(&probe.words[1].to_le_bytes());
        self.set_ctrl(i, fingerprint(probe.tag));
        self.slots[i] = Slot {
            key: slot_key,
            ..Slot::default()
        };
        self.len += 1;
        Upsert::Created(i as u32)
    }

    /// Doubles the table; slot indices change, so the dirty list is rebuilt.
    fn grow(&mut self) {
        let capacity = self.capacity() * 2;
        let slots = std::mem::replace(
            &mut self.slots,
            HugeArray::filled(capacity, Slot::default()),
        );
        let ctrl = std::mem::replace(&mut self.ctrl, vec![EMPTY_BYTE; capacity + GROUP]);
        self.mask = capacity - 1;
        self.grow_at = capacity / 5 * 4;
        self.generation += 1;
        self.dirty.clear();
        for (&slot, _) in slots.iter().zip(&ctrl).filter(|(_, c)| **c != EMPTY_BYTE) {
            let tag = (self.tag_of)(self.seed, self.slot_key(&slot));
            let mut i = tag as usize & self.mask;
            while self.ctrl[i] != EMPTY_BYTE {
                i = (i + 1) & self.mask;
            }
            self.set_ctrl(i, fingerprint(tag));
            self.slots[i] = slot;
            if slot.is_dirty() {
                self.dirty.push(i as u32);
            }
        }
    }

    #[inline]
    pub fn slot(&self, i: u32) -> &Slot<S> {
        &self.slots[i as usize]
    }

    #[inline]
    pub fn slot_mut(&mut self, i: u32) -> &mut Slot<S> {
        &mut self.slots[i as usize]
    }

    pub fn key(&self, i: u32) -> &[u8] {
        self.slot_key(&self.slots[i as usize])
    }

    fn slot_key<'a>(&'a self, slot: &'a Slot<S>) -> &'a [u8] {
        let len = slot.key[META] & !DIRTY;
        if len == LONG {
            &self.long_keys[slot.words()[0] as usize]
        } else {
            &slot.key[..len as usize]
        }
    }

    /// Indices of the occupied slots.
    pub fn occupied(&self) -> impl Iterator<Item = u32> + '_ {
        self.ctrl[..self.capacity()]
            .iter()
            .enumerate()
            .filter(|(_, c)| **c != EMPTY_BYTE)
            .map(|(i, _)| i as u32)
    }

    /// The changed slots: the dirty list, or a scan of the table in slot
    /// order when most slots changed (sequential reads beat random ones).
    pub fn take_dirty(&mut self) -> Vec<u32> {
        let dirty = std::mem::take(&mut self.dirty);
        if dirty.len() * 4 < self.capacity() {
            return dirty;
        }
        self.slots
            .iter()
            .zip(&self.ctrl)
            .enumerate()
            .filter(|(_, (s, c))| **c != EMPTY_BYTE && s.is_dirty())
            .map(|(i, _)| i as u32)
            .collect()
    }

    /// Marks slot `i` changed.
    #[inline]
    pub fn touch(&mut self, i: u32) {
        let slot = &mut self.slots[i as usize];
        if !slot.is_dirty() {
            slot.key[META] |= DIRTY;
            self.dirty.push(i);
        }
    }
}

/// The tables of the live window starts, ascending by start, with a pool of
/// emptied tables to reuse.
pub(crate) struct Tables<S> {
    /// A few tables at most (the starts within size + grace of stream
    /// time), so a plain vector.
    live: Vec<StartTable<S>>,
    pool: Vec<StartTable<S>>,
    /// The key hash's seed, random per processor.
    seed: u64,
    /// Tables created or reused so far: the high half of a new table's
    /// generation (growth counts in the low half).
    created: u64,
}

impl<S: Copy + Default> Tables<S> {
    pub fn new() -> Self {
        Self {
            live: Vec::new(),
            pool: Vec::new(),
            seed: FastState::default().hash_one(0x7ab1e_u64),
            created: 0,
        }
    }

    /// Prepares `key` for probing: its tag (its hash with the live bit set)
    /// and its slot words.
    #[inline(always)]
    #[allow(
        clippy::inline_always,
        reason = "hot per-record path: measured, the calls were not inlined"
    )]
    pub fn probe(&self, key: &[u8]) -> Probe {
        let words = slot_words(key);
        Probe {
            tag: tag_with(self.seed, key, words),
            words,
        }
    }

    /// The position of `start`'s table in `live`, if any; records mostly
    /// hit the newest tables.
    #[inline]
    pub fn find(&self, start: i64) -> Option<usize> {
        let n = self.live.len();
        if n > 0 && self.live[n - 1].start == start {
            return Some(n - 1);
        }
        self.live.iter().rposition(|t| t.start == start)
    }

    /// The table of `start`, created if needed.
    #[inline]
    pub fn get_or_create(&mut self, start: i64) -> &mut StartTable<S> {
        let p = match self.find(start) {
            Some(p) => p,
            None => self.create(start),
        };
        &mut self.live[p]
    }

    /// Adds a table for `start` (not live yet); returns its position.
    #[cold]
    #[inline(never)]
    fn create(&mut self, start: i64) -> usize {
        let at = self
            .live
            .iter()
            .rposition(|t| t.start < start)
            .map_or(0, |p| p + 1);
        // Size a new start like the newest one: the same keys tend to come
        // back, so it should not need to grow.
        let capacity = self.live.last().map_or(8, StartTable::capacity);
        let mut table = match self.pool.pop() {
            Some(mut t) if t.capacity() >= capacity => {
                t.reset(start);
                t
            }
            _ => StartTable::with_capacity(start, capacity, self.seed),
        };
        self.created += 1;
        table.generation = self.created << 32;
        self.live.insert(at, table);
        at
    }

    /// Prefetches the slot of `tag` in `start`'s table; the hint saves
    /// the lookup its probe (no hint when the table does not exist yet).
    #[inline]
    pub fn prefetch(&self, start: i64, tag: u64) -> Hint {
        match self.find(start) {
            Some(p) => self.live[p].prefetch(tag),
            None => Hint::NONE,
        }
    }

    /// See [`StartTable::prefetch_ctrl`].
    #[inline]
    pub fn prefetch_ctrl(&self, start: i64, tag: u64) {
        if let Some(p) = self.find(start) {
            self.live[p].prefetch_ctrl(tag);
        }
    }

    /// The smallest live start, `i64::MAX` when none.
    #[inline]
    pub fn first_start(&self) -> i64 {
        self.live.first().map_or(i64::MAX, |t| t.start)
    }

    pub fn first(&self) -> Option<&StartTable<S>> {
        self.live.first()
    }

    pub fn first_mut(&mut self) -> Option<&mut StartTable<S>> {
        self.live.first_mut()
    }

    /// Drops the oldest table (into the pool).
    pub fn pop_first(&mut self) {
        if let Some(t) = self.take_first() {
            self.recycle(t);
        }
    }

    /// Takes the oldest table out of the live ones.
    pub fn take_first(&mut self) -> Option<StartTable<S>> {
        (!self.live.is_empty()).then(|| self.live.remove(0))
    }

    /// Keeps a table taken out for reuse by a later start.
    pub fn recycle(&mut self, table: StartTable<S>) {
        if self.pool.len() < 4 {
            self.pool.push(table);
        }
    }

    pub fn iter_mut(&mut self) -> impl Iterator<Item = &mut StartTable<S>> {
        self.live.iter_mut()
    }

    /// Windows held.
    pub fn len(&self) -> usize {
        self.live.iter().map(StartTable::len).sum()
    }

    /// The bytes of the live tables' slot arrays.
    pub fn slot_bytes(&self) -> usize {
        let slots: usize = self.live.iter().map(StartTable::capacity).sum();
        slots * std::mem::size_of::<Slot<S>>()
    }
}

/// A software prefetch: a hint with no effect on memory, so any pointer is
/// fine. The random probes of large tables are the kernel's cost; issuing
/// them several records ahead overlaps their cache misses (measured: about
/// 2x on 100,000 keys).
#[inline]
pub(crate) fn prefetch_read(p: *const i8) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: `_mm_prefetch` is a hint: it never faults or reads memory
    // architecturally, whatever the address; SSE is part of the x86_64
    // baseline.
    unsafe {
        core::arch::x86_64::_mm_prefetch::<{ core::arch::x86_64::_MM_HINT_T0 }>(p);
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The number a test key ends with.
    fn number(key: &[u8]) -> u64 {
        let digits = key.iter().rev().take_while(|b| b.is_ascii_digit()).count();
        std::str::from_utf8(&key[key.len() - digits..])
            .unwrap()
            .parse()
            .unwrap()
    }

    #[test]
    fn slots_take_half_a_line_or_a_line() {
        use crate::window::MeanState;
        assert_eq!(size_of::<Slot<i64>>(), 32);
        assert_eq!(size_of::<Slot<f64>>(), 32);
        assert_eq!(size_of::<Slot<MeanState>>(), 64);
    }

    /// Keys of every length around the inline limit, all-zero ones among
    /// them (so only the length tells them apart), are found again with
    /// their exact bytes, marked dirty or not, across growth.
    #[test]
    fn keys_of_every_length_round_trip() {
        let mut tables: Tables<i64> = Tables::new();
        let mut keys: Vec<Vec<u8>> = Vec::new();
        for n in 0..=40u8 {
            keys.push(vec![0; n as usize]);
            keys.push(vec![0xff; n as usize]);
            keys.push((1..=n).collect());
        }
        keys.dedup();
        for (n, k) in keys.iter().enumerate() {
            let probe = tables.probe(k);
            let t = tables.get_or_create(0);
            let Upsert::Created(i) = t.upsert(k, &probe) else {
                panic!("{k:?} found before it was added")
            };
            t.slot_mut(i).state = n as i64;
            if n % 2 == 1 {
                t.touch(i);
            }
            for (m, seen) in keys[..=n].iter().enumerate() {
                let probe = tables.probe(seen);
                let t = tables.get_or_create(0);
                let Upsert::Found(i) = t.upsert(seen, &probe) else {
                    panic!("{seen:?} lost after adding {k:?}")
                };
                assert_eq!(t.key(i), &seen[..]);
                assert_eq!(t.slot(i).state, m as i64);
                assert_eq!(t.slot(i).is_dirty(), m % 2 == 1, "{seen:?}");
            }
        }
        assert!(tables.first().unwrap().generation & 0xffff_ffff > 1, "grew");
    }

    #[test]
    fn upsert_grows_and_keeps_keys_and_dirty_slots() {
        let mut tables: Tables<i64> = Tables::new();
        let long = b"a key longer than sixteen bytes".to_vec();
        let keys: Vec<Vec<u8>> = (0..100)
            .map(|i| format!("k{i}").into_bytes())
            .chain([long.clone()])
            .collect();
        for (n, k) in keys.iter().enumerate() {
            let probe = tables.probe(k);
            let t = tables.get_or_create(10);
            match t.upsert(k, &probe) {
                Upsert::Created(i) => {
                    t.slot_mut(i).state = n as i64;
                    if n % 2 == 0 {
                        t.touch(i);
                    }
                }
                Upsert::Found(_) => panic!("new key found"),
            }
        }
        let probe = tables.probe(&long);
        let t = tables.get_or_create(10);
        let Upsert::Found(i) = t.upsert(&long, &probe) else {
            panic!("existing key not found")
        };
        assert_eq!(t.slot(i).state, 100);
        assert_eq!(t.key(i), &long[..]);
        assert_eq!(t.len(), 101);
        assert_eq!(t.dirty.len(), 51);
        assert!(t.dirty.iter().all(|&i| t.slot(i).is_dirty()));
        let mut seen: Vec<Vec<u8>> = t.occupied().map(|i| t.key(i).to_vec()).collect();
        seen.sort();
        let mut want = keys.clone();
        want.sort();
        assert_eq!(seen, want);
    }

    /// Keys with one tag (so one home slot and one fingerprint) fill a run
    /// that wraps past the end of the table, through the mirrored control
    /// bytes, and across growth; each is found again in its own slot.
    #[test]
    fn colliding_keys_wrap_and_survive_growth() {
        let mut t: StartTable<i64> = StartTable::with_capacity(0, 32, 0);
        assert_eq!(t.mask, 31);
        let keys: Vec<Vec<u8>> = (0..60).map(|i| format!("k{i}").into_bytes()).collect();
        // Half the keys share the last slot as home, the rest start at slot
        // 0 with another fingerprint, so the two runs interleave; growth
        // gives them the same tags.
        t.tag_of = |_, k| {
            if number(k).is_multiple_of(2) {
                LIVE | 31
            } else {
                LIVE | (7 << 48)
            }
        };
        let tag_of = t.tag_of;
        let probe = |_: usize, k: &[u8]| Probe::with_tag(k, tag_of(0, k));
        for (n, k) in keys.iter().enumerate() {
            let Upsert::Created(i) = t.upsert(k, &probe(n, k)) else {
                panic!("key {n} found before it was added")
            };
            t.slot_mut(i).state = n as i64;
            for (m, seen) in keys[..=n].iter().enumerate() {
                let Upsert::Found(i) = t.upsert(seen, &probe(m, seen)) else {
                    panic!("key {m} lost after adding key {n}")
                };
                assert_eq!(t.slot(i).state, m as i64);
                assert_eq!(t.key(i), &seen[..]);
            }
        }
        assert_eq!(t.len(), keys.len());
        assert!(t.capacity() >= 64, "the table grew");
        let mirror = &t.ctrl[t.capacity()..];
        assert_eq!(mirror, &t.ctrl[..GROUP]);
        for pos in 0..t.capacity() {
            let g = Group::load(&t.ctrl, pos, 0);
            for b in 0..GROUP {
                let c = t.ctrl[(pos + b) & t.mask];
                assert_eq!(g.empties >> b & 1 == 1, c == EMPTY_BYTE, "{pos}+{b}");
            }
        }
    }

    /// Hinted lookups against a map, step by step: each key's hint is
    /// taken a random number of steps before its lookup, while other keys
    /// are added and the table grows; keys share tags and fingerprints
    /// (colliding runs), and some are longer than the inline bytes. A
    /// hinted lookup finds the same slot as a plain one, and every count
    /// matches the map's.
    #[test]
    fn stale_hints_agree_with_a_map() {
        let mut rng = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move |n: u64| {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            rng % n
        };
        let tables: Tables<i64> = Tables::new();
        let mut t: StartTable<i64> = StartTable::with_capacity(0, 16, tables.seed);
        // Every third key shares one tag, the others take their own hash.
        t.tag_of = |seed, k| {
            if number(k).is_multiple_of(3) {
                LIVE | (9 << 48) | 5
            } else {
                key_tag(seed, k)
            }
        };
        let tag_of = t.tag_of;
        let key = |k: u64| {
            if k.is_multiple_of(5) {
                format!("a long key of more than sixteen bytes {k}").into_bytes()
            } else {
                format!("k{k}").into_bytes()
            }
        };
        let probe = |_: u64, bytes: &[u8]| {
            let p = tables.probe(bytes);
            assert_eq!(
                Probe::with_tag(bytes, key_tag(tables.seed, bytes)).words,
                p.words
            );
            Probe::with_tag(bytes, tag_of(tables.seed, bytes))
        };
        let mut model = std::collections::HashMap::new();
        let mut pending = std::collections::VecDeque::<(u64, Hint)>::new();
        for step in 0..20_000 {
            let k = next(400 + step / 20);
            let bytes = key(k);
            pending.push_back((k, t.prefetch(probe(k, &bytes).tag)));
            while pending.len() > next(24) as usize {
                let (k, hint) = pending.pop_front().expect("a pending lookup");
                let bytes = key(k);
                let p = probe(k, &bytes);
                let known = model.get(&k).copied();
                let i = match (t.upsert_hinted(&bytes, &p, hint), known) {
                    (Upsert::Found(i), Some(count)) => {
                        assert_eq!(t.slot(i).state, count, "key {k} at step {step}");
                        i
                    }
                    (Upsert::Created(i), None) => i,
                    (_, known) => panic!("key {k} at step {step}: the map has {known:?}"),
                };
                assert_eq!(t.key(i), &bytes[..]);
                let generation = t.generation;
                let Upsert::Found(again) = t.upsert(&bytes, &p) else {
                    panic!("key {k} lost at step {step}")
                };
                // A plain lookup may grow the table first (slots move).
                if t.generation == generation {
                    assert_eq!(again, i, "key {k} at step {step}");
                }
                assert_eq!(t.key(again), &bytes[..]);
                t.slot_mut(again).state += 1;
                *model.entry(k).or_insert(0) += 1;
            }
        }
        assert_eq!(t.len(), model.len());
        assert!(t.generation > 3, "the table grew while hints were pending");
    }

    /// A hint taken in a table that is then recycled for another start
    /// (same slots, emptied) is ignored: the key goes to the head of its
    /// probe path, not where the hint saw its path end.
    #[test]
    fn hints_do_not_survive_recycling() {
        let mut tables: Tables<i64> = Tables::new();
        let tag = LIVE | 3;
        for n in 0..12 {
            let k = format!("k{n}").into_bytes();
            tables
                .get_or_create(10)
                .upsert(&k, &Probe::with_tag(&k, tag));
        }
        // Same home slot, another fingerprint: the hint is the empty slot
        // past the twelve keys.
        let p = Probe::with_tag(b"new", tag | 5 << 48);
        let hint = tables.prefetch(10, p.tag);
        assert_eq!(hint.at, 15);
        tables.pop_first();
        let t = tables.get_or_create(20);
        assert_eq!(t.len(), 0);
        let Upsert::Created(i) = t.upsert_hinted(b"new", &p, hint) else {
            panic!("a key found in an emptied table")
        };
        assert_eq!(i, 3);
        assert!(matches!(t.upsert(b"new", &p), Upsert::Found(3)));
        assert_eq!(tables.prefetch(30, p.tag).generation, Hint::NONE.generation);
    }

    #[test]
    fn short_keys_become_padded_words() {
        for n in 0..=INLINE_KEY {
            let key: Vec<u8> = (1..=n as u8).collect();
            let words = short_key_words(&key);
            let mut bytes = [0u8; 16];
            bytes[..8].copy_from_slice(&words[0].to_le_bytes());
            bytes[8..].copy_from_slice(&words[1].to_le_bytes());
            assert_eq!(&bytes[..n], &key[..], "{n}");
            assert!(bytes[n..].iter().all(|&b| b == 0), "{n}");
        }
        let t: Tables<i64> = Tables::new();
        // Keys that pad alike still differ by length.
        assert_ne!(t.probe(b"a").tag, t.probe(b"a\0").tag);
        assert_ne!(t.probe(&[7; 15]).tag, t.probe(&[7; 16]).tag);
        assert_ne!(t.probe(&[7; 17]).tag, t.probe(&[7; 18]).tag);
        assert_eq!(t.probe(&[7; 40]).tag, t.probe(&[7; 40]).tag);
    }

    #[test]
    fn tables_stay_ordered_and_are_recycled() {
        let mut tables: Tables<i64> = Tables::new();
        for start in [20, 0, 10, 30] {
            tables.get_or_create(start);
        }
        assert_eq!(tables.first_start(), 0);
        assert_eq!(tables.find(30), Some(3));
        tables.pop_first();
        assert_eq!(tables.first_start(), 10);
        let probe = tables.probe(b"x");
        let t = tables.get_or_create(40);
        assert_eq!(t.len(), 0);
        assert!(matches!(t.upsert(b"x", &probe), Upsert::Created(_)));
        assert_eq!(tables.len(), 1);
    }
}
