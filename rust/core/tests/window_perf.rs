//! Throughput of the windowed aggregation kernels (no timing assertions):
//!
//! ```text
//! cargo test -p strom-core --release --test window_perf -- --ignored --nocapture
//! ```
//!
//! One columnar batch of 10,000,000 records over 100,000 keys (`key-<n>`,
//! uniformly random), timestamps advancing 1 ms per 10 records with up to
//! 2 s of disorder; 60 s windows, 5 s grace, results on every update.
//! Tumbling, and hopping with size / advance = 4. Each case runs three
//! times on a fresh processor (the results buffer is reused, as a caller
//! processing batch after batch would); the best and the first run are
//! printed with the machine's load average, since a shared machine makes
//! single runs noisy; times are the thread's CPU time where Linux reports
//! it. `STROM_WINDOW_PERF_CALLS=100` splits the records
//! into 100 batches, as `benches/test_window_kernels.py` calls the binding
//! (its results then fit in cache and are not page-faulted in afresh);
//! `STROM_WINDOW_PERF_KEYS=1000` draws the keys from fewer (all in cache:
//! the kernels' work without the slot misses); `STROM_WINDOW_PERF_SIZE`
//! sets the window size in ms (60000; with 600000 a key's window takes
//! ten times the records, so new windows are a tenth as frequent);
//! `STROM_WINDOW_PERF_DRAIN=1` drains the store changes after every batch
//! (timed), as the DSL's node does; `STROM_WINDOW_PERF_CASES`
//! runs only the cases whose names contain one of its comma-separated
//! parts (`"tumbling count"` for a profile of one, `"count"` for two). `bare_hash_map_yardstick`
//! runs the same records through a bare loop over hash maps (100 batches;
//! `cargo test ... -- --ignored --nocapture bare` runs it alone), to show
//! how far the kernels are from the machine; `pane_ring_yardstick`
//! (`... pane`) through a bare loop over one ring of panes per key, and
//! `directory_yardstick` (`... directory`) through a key directory and
//! dense per-window arrays.

use std::time::Instant;

use strom_core::window::{
    Aggregate, Batch, BinaryBuffer, Count, EmitStrategy, NoValues, Sum, TimeWindowedAggregation,
    TimeWindows, ValueColumn, Values, WindowedResults,
};

const RECORDS: usize = 10_000_000;
const RUNS: usize = 3;

struct Input {
    keys: Vec<BinaryBuffer>,
    timestamps: Vec<i64>,
    values: Vec<i64>,
}

/// The records, their keys cut into `calls` batches.
fn input(calls: usize, n_keys: u64) -> Input {
    let mut state = 0x2545_f491_4f6c_dd1du64;
    let mut next = || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    let mut keys = vec![BinaryBuffer::new(); calls];
    let mut timestamps = Vec::with_capacity(RECORDS);
    let mut values = Vec::with_capacity(RECORDS);
    for i in 0..RECORDS {
        keys[i * calls / RECORDS].push(format!("key-{}", next() % n_keys).as_bytes());
        let disorder = (next() % 2_000) as i64;
        timestamps.push((i as i64 / 10 - disorder).max(0));
        values.push((next() % 1_000) as i64);
    }
    Input {
        keys,
        timestamps,
        values,
    }
}

fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg").map_or_else(
        |_| "?".into(),
        |s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "),
    )
}

/// This thread's CPU time in seconds (the first field of its schedstat),
/// or None where the kernel does not report it: on a loaded machine wall
/// time mostly measures the other processes.
fn thread_cpu_seconds() -> Option<f64> {
    let s = std::fs::read_to_string("/proc/thread-self/schedstat").ok()?;
    let ns: f64 = s.split_whitespace().next()?.parse().ok()?;
    Some(ns / 1e9)
}

/// A stopwatch of this thread's CPU time (wall time where Linux does not
/// report it).
struct Stopwatch(Instant, Option<f64>);

impl Stopwatch {
    fn start() -> Self {
        Self(Instant::now(), thread_cpu_seconds())
    }

    fn seconds(&self) -> f64 {
        match (self.1, thread_cpu_seconds()) {
            (Some(from), Some(to)) => to - from,
            _ => self.0.elapsed().as_secs_f64(),
        }
    }
}

fn best(seconds: &[f64]) -> f64 {
    seconds.iter().copied().fold(f64::INFINITY, f64::min)
}

/// How many keys the records draw from (`STROM_WINDOW_PERF_KEYS`).
fn n_keys() -> u64 {
    std::env::var("STROM_WINDOW_PERF_KEYS").map_or(100_000, |k| {
        k.parse().expect("STROM_WINDOW_PERF_KEYS is a number")
    })
}

/// The yardsticks' batches, window size and grace (as the kernel runs'),
/// and their two cases: tumbling, and hopping by a quarter of the size.
const YARDSTICK_CALLS: usize = 100;
const YARDSTICK_SIZE: i64 = 60_000;
const YARDSTICK_GRACE: i64 = 5_000;
const YARDSTICK_CASES: [(&str, i64); 2] = [
    ("tumbling count", YARDSTICK_SIZE),
    ("hopping (4 windows) count", YARDSTICK_SIZE / 4),
];

/// A yardstick's line: its best run, per record, and what it counted.
fn report_yardstick(name: &str, seconds: &[f64], counted: &str) {
    let best = best(seconds);
    println!(
        "{name:<26} best {:>5.1} M records/s ({best:.2} s), {:.1} ns a record; {counted}; load {}",
        RECORDS as f64 / best / 1e6,
        best * 1e9 / RECORDS as f64,
        load_average(),
    );
}

fn run<A, C>(name: &str, agg: &A, windows: TimeWindows, batches: &[Batch<'_, C>])
where
    A: Aggregate,
    C: ValueColumn<Value = A::Value>,
{
    if std::env::var("STROM_WINDOW_PERF_CASES")
        .is_ok_and(|cases| !cases.split(',').any(|case| name.contains(case.trim())))
    {
        return;
    }
    let mut out = WindowedResults::new();
    let mut seconds = Vec::new();
    let drain = std::env::var_os("STROM_WINDOW_PERF_DRAIN").is_some();
    let mut changes = 0;
    for _ in 0..RUNS {
        changes = 0;
        let mut p =
            TimeWindowedAggregation::new(agg.clone(), windows, EmitStrategy::OnWindowUpdate);
        let clock = Stopwatch::start();
        for batch in batches {
            p.process_into(batch, 0, &mut out);
            if drain {
                changes += p.drain_changes().len();
            }
        }
        seconds.push(clock.seconds());
        changes += p.drain_changes().len();
    }
    let best = best(&seconds);
    println!(
        "{name:<26} best {:>5.1} M records/s ({:.2} s), first {:>5.1} M/s; {} results, {} store changes; load {}",
        RECORDS as f64 / best / 1e6,
        best,
        RECORDS as f64 / seconds[0] / 1e6,
        out.len() * batches.len(),
        changes,
        load_average(),
    );
}

#[test]
#[ignore = "throughput measurement; run in release mode"]
fn windowed_count_and_sum_throughput() {
    let calls: usize = std::env::var("STROM_WINDOW_PERF_CALLS").map_or(1, |c| {
        c.parse().expect("STROM_WINDOW_PERF_CALLS is a number")
    });
    let n_keys = n_keys();
    let input = input(calls, n_keys);
    let size: i64 = std::env::var("STROM_WINDOW_PERF_SIZE").map_or(60_000, |s| s.parse().unwrap());
    let tumbling = TimeWindows::of_size_and_grace(size, 5_000).unwrap();
    let hopping = tumbling.advance_by(size / 4).unwrap();
    let step = RECORDS / calls;
    let rows = |i: usize| i * step..(i + 1) * step;
    let counts: Vec<_> = (0..calls)
        .map(|i| {
            let ts = &input.timestamps[rows(i)];
            Batch::new(input.keys[i].column(), ts, NoValues::new(ts.len())).unwrap()
        })
        .collect();
    let values: Vec<_> = (0..calls)
        .map(|i| {
            Batch::new(
                input.keys[i].column(),
                &input.timestamps[rows(i)],
                Values::new(&input.values[rows(i)]),
            )
            .unwrap()
        })
        .collect();
    println!("{RECORDS} records, {n_keys} keys, {calls} batch(es), emit on window update:");
    run("tumbling count", &Count, tumbling, &counts);
    run("tumbling sum", &Sum::<i64>::new(), tumbling, &values);
    run("hopping (4 windows) count", &Count, hopping, &counts);
    run(
        "hopping (4 windows) sum",
        &Sum::<i64>::new(),
        hopping,
        &values,
    );
}

/// A key of at most 15 bytes as one integer (its bytes zero-padded, its
/// length in the top byte), read with overlapping word loads.
fn key_word(k: &[u8]) -> u128 {
    let n = k.len();
    assert!(n <= 15, "the yardstick's keys fit 15 bytes");
    let word = |at: usize| u64::from_le_bytes(k[at..at + 8].try_into().expect("8 bytes"));
    let half = |at: usize| u64::from(u32::from_le_bytes(k[at..at + 4].try_into().expect("4")));
    let (low, high) = if n >= 8 {
        (
            word(0),
            if n > 8 {
                word(n - 8) >> ((16 - n) * 8)
            } else {
                0
            },
        )
    } else if n >= 4 {
        (half(0) | half(n - 4) << ((n - 4) * 8), 0)
    } else {
        let low = k
            .iter()
            .enumerate()
            .fold(0, |w, (i, &b)| w | u64::from(b) << (8 * i));
        (low, 0)
    };
    u128::from(low) | u128::from(high | (n as u64) << 56) << 64
}

/// The kernels' key hash (two multiply-mix rounds, one per key word, then
/// a finalizer): a single round clusters keys that differ in a few bytes,
/// and the maps then fit in cache.
#[derive(Default)]
struct MixHasher(u64);

impl std::hash::Hasher for MixHasher {
    fn finish(&self) -> u64 {
        let h = self.0;
        (h ^ (h >> 29)).wrapping_mul(0xbf58_476d_1ce4_e5b9) ^ (h >> 32)
    }

    fn write(&mut self, _: &[u8]) {
        unreachable!("keys hash as u128")
    }

    fn write_u128(&mut self, x: u128) {
        let mix =
            |h: u64, word: u64| (h.rotate_left(26) ^ word).wrapping_mul(0xf135_7aea_2e62_a9c5);
        self.0 = mix(mix(0x9e37_79b9_7f4a_7c15, x as u64), (x >> 64) as u64);
    }
}

/// One window start's keys: count, result timestamp, changed since the
/// last drain.
type BareMap = hashbrown::HashMap<u128, (i64, i64, bool), std::hash::BuildHasherDefault<MixHasher>>;

/// The yardstick: a windowed count's work per record (key, probe, count and
/// timestamp, the changed windows listed once, closed windows' changes
/// captured, five result columns) in a bare loop over hashbrown maps, one
/// per window start, sized as the kernel sizes its tables; no prefetching,
/// no null keys, no late-record accounting beyond a count. It shows how
/// close the kernels run to the memory and the machine (see the design
/// notes in `src/window/mod.rs`).
#[test]
#[ignore = "throughput measurement; run in release mode"]
fn bare_hash_map_yardstick() {
    let (calls, n_keys) = (YARDSTICK_CALLS, n_keys());
    let input = input(calls, n_keys);
    let (size, grace) = (YARDSTICK_SIZE, YARDSTICK_GRACE);
    println!("{RECORDS} records, {n_keys} keys, {calls} batches, a bare loop over hash maps:");
    for (name, advance) in YARDSTICK_CASES {
        let mut seconds = Vec::new();
        let mut results = 0;
        for _ in 0..RUNS {
            let mut tables: Vec<(i64, BareMap, Vec<u128>)> = Vec::new();
            let mut changes: Vec<(u128, i64, i64, i64)> = Vec::new();
            let (mut rows, mut starts, mut ends, mut values, mut stamps) =
                (Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new());
            let (mut stream_time, mut expired) = (-1_i64, 0_u64);
            results = 0;
            let clock = Stopwatch::start();
            for (b, keys) in input.keys.iter().enumerate() {
                let column = keys.column();
                let from = b * (RECORDS / calls);
                for (i, &ts) in input.timestamps[from..from + column.len()]
                    .iter()
                    .enumerate()
                {
                    let key = key_word(column.get(i).expect("a key"));
                    stream_time = stream_time.max(ts);
                    let close = stream_time - grace;
                    while tables.first().is_some_and(|t| t.0 + size <= close) {
                        let (start, map, changed) = tables.remove(0);
                        for k in changed {
                            let (count, ts, _) = map[&k];
                            changes.push((k, start, count, ts));
                        }
                    }
                    let mut start = (ts - size + advance).max(0) / advance * advance;
                    while start <= ts {
                        if start + size <= close {
                            expired += 1;
                            start += advance;
                            continue;
                        }
                        let at = if let Some(at) = tables.iter().rposition(|t| t.0 == start) {
                            at
                        } else {
                            let at = tables
                                .iter()
                                .rposition(|t| t.0 < start)
                                .map_or(0, |p| p + 1);
                            let capacity = tables.last().map_or(0, |t| t.1.capacity());
                            let map = BareMap::with_capacity_and_hasher(
                                capacity,
                                std::hash::BuildHasherDefault::default(),
                            );
                            tables.insert(at, (start, map, Vec::new()));
                            at
                        };
                        let table = &mut tables[at];
                        let window = table.1.entry(key).or_insert((0, ts, false));
                        window.0 += 1;
                        window.1 = window.1.max(ts);
                        if !window.2 {
                            window.2 = true;
                            table.2.push(key);
                        }
                        rows.push((from + i) as u32);
                        starts.push(start);
                        ends.push(start + size);
                        values.push(window.0);
                        stamps.push(window.1);
                        start += advance;
                    }
                }
                results += rows.len();
                for column in [&mut starts, &mut ends, &mut values, &mut stamps] {
                    column.clear();
                }
                rows.clear();
            }
            seconds.push(clock.seconds());
            assert_eq!(expired, 0, "the input has no late records");
        }
        report_yardstick(name, &seconds, &format!("{results} results"));
    }
}

/// One key's panes (windows of the advance's length; a window's count and
/// timestamp are its panes' sum and maximum): counts, timestamps as offsets
/// into their pane, a changed bit per window start, 2 cache lines.
#[derive(Clone, Copy, Default)]
#[repr(C, align(64))]
struct PaneSlot {
    key: u128,
    lowest: i64,
    dirty: u8,
    counts: [u32; 8],
    offsets: [u32; 8],
}

/// Records ahead whose pane slots are prefetched.
const AHEAD: usize = 16;

#[inline]
fn prefetch(p: *const PaneSlot) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch never faults.
    unsafe {
        use core::arch::x86_64::{_MM_HINT_T0, _mm_prefetch};
        _mm_prefetch::<_MM_HINT_T0>(p.cast());
        _mm_prefetch::<_MM_HINT_T0>(p.cast::<u8>().wrapping_add(64).cast());
    }
}

/// A second yardstick: one slot per key holding a ring of its panes, so
/// a record makes one lookup and one update whatever its number of
/// windows, and a key's new window inserts nothing; a window's result is
/// the sum of its panes (exact for counts and integer sums, not for
/// floating-point ones). The changes of windows whose panes leave the ring
/// are captured, as the kernels' closes do. Knock-outs, to see where the
/// time goes: `STROM_WINDOW_PERF_NO_RESULTS=1` writes no result columns,
/// `STROM_WINDOW_PERF_NO_CAPTURE=1` keeps no captured changes.
#[test]
#[ignore = "throughput measurement; run in release mode"]
fn pane_ring_yardstick() {
    use std::hash::BuildHasher;
    let (calls, n_keys) = (YARDSTICK_CALLS, n_keys());
    let input = input(calls, n_keys);
    let (size, grace) = (YARDSTICK_SIZE, YARDSTICK_GRACE);
    let hasher = std::hash::BuildHasherDefault::<MixHasher>::default();
    println!("{RECORDS} records, {n_keys} keys, {calls} batches, a ring of panes per key:");
    for (name, advance) in YARDSTICK_CASES {
        let per = (size / advance) as usize;
        let no_capture = std::env::var_os("STROM_WINDOW_PERF_NO_CAPTURE").is_some();
        let no_results = std::env::var_os("STROM_WINDOW_PERF_NO_RESULTS").is_some();
        let mut seconds = Vec::new();
        let mut results = 0;
        let mut captured = 0;
        for _ in 0..RUNS {
            let mask = (n_keys as usize * 2).next_power_of_two() - 1;
            let mut slots = vec![PaneSlot::default(); mask + 1];
            let mut changes: Vec<(u128, i64, u64, i64)> = Vec::new();
            let (mut rows, mut starts, mut ends, mut values, mut stamps) =
                (Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new());
            let (mut words, mut homes) = (Vec::new(), Vec::new());
            let (mut stream_time, mut expired) = (-1_i64, 0_u64);
            results = 0;
            let clock = Stopwatch::start();
            for (b, keys) in input.keys.iter().enumerate() {
                let column = keys.column();
                let from = b * (RECORDS / calls);
                words.clear();
                homes.clear();
                for i in 0..column.len() {
                    let key = key_word(column.get(i).expect("a key"));
                    words.push(key);
                    homes.push(hasher.hash_one(key) as usize & mask);
                }
                for &h in homes.iter().take(AHEAD) {
                    prefetch(&raw const slots[h]);
                }
                for (i, &ts) in input.timestamps[from..from + column.len()]
                    .iter()
                    .enumerate()
                {
                    if let Some(&h) = homes.get(i + AHEAD) {
                        prefetch(&raw const slots[h]);
                    }
                    let key = words[i];
                    stream_time = stream_time.max(ts);
                    let close = stream_time - grace;
                    let pane = ts / advance;
                    let mut at = homes[i];
                    while slots[at].key != key && slots[at].key != 0 {
                        at = (at + 1) & mask;
                    }
                    let slot = &mut slots[at];
                    if slot.key == 0 {
                        slot.key = key;
                        slot.lowest = (pane - 4).max(0);
                    }
                    if pane >= slot.lowest + 8 {
                        // Panes leave the ring: capture the changed windows
                        // that start in them (closed by now) first.
                        let lowest = pane - 7;
                        for w in slot.lowest..lowest.min(slot.lowest + 8) {
                            let bit = 1 << (w & 7);
                            if slot.dirty & bit != 0 {
                                slot.dirty &= !bit;
                                let (mut count, mut stamp) = (0_u64, 0_i64);
                                for q in w..(w + per as i64).min(slot.lowest + 8) {
                                    let r = (q & 7) as usize;
                                    count += u64::from(slot.counts[r]);
                                    stamp = stamp.max(q * advance + i64::from(slot.offsets[r]));
                                }
                                if no_capture {
                                    std::hint::black_box((count, stamp));
                                } else {
                                    changes.push((key, w * advance, count, stamp));
                                }
                            }
                            let r = (w & 7) as usize;
                            slot.counts[r] = 0;
                            slot.offsets[r] = 0;
                        }
                        slot.lowest = lowest;
                    }
                    assert!(
                        pane >= slot.lowest,
                        "the yardstick's input is never that late"
                    );
                    let r = (pane & 7) as usize;
                    slot.counts[r] += 1;
                    slot.offsets[r] = slot.offsets[r].max((ts - pane * advance) as u32);
                    let first = (pane + 1 - per as i64).max(0).max(slot.lowest);
                    for w in first..=pane {
                        if (w * advance) + size <= close {
                            expired += 1;
                            continue;
                        }
                        let (mut count, mut stamp) = (0_u64, 0_i64);
                        for q in w..w + per as i64 {
                            let r = (q & 7) as usize;
                            count += u64::from(slot.counts[r]);
                            stamp = stamp.max(q * advance + i64::from(slot.offsets[r]));
                        }
                        slot.dirty |= 1 << (w & 7);
                        if no_results {
                            std::hint::black_box((count, stamp));
                            continue;
                        }
                        rows.push((from + i) as u32);
                        starts.push(w * advance);
                        ends.push(w * advance + size);
                        values.push(count as i64);
                        stamps.push(stamp);
                    }
                }
                results += rows.len();
                for column in [&mut starts, &mut ends, &mut values, &mut stamps] {
                    column.clear();
                }
                rows.clear();
            }
            seconds.push(clock.seconds());
            captured = changes.len();
            assert_eq!(expired, 0, "the input has no late records");
        }
        let counted = format!("{results} results, {captured} changes captured");
        report_yardstick(name, &seconds, &counted);
    }
}

/// A key directory: each key's dense id, found by open addressing from
/// the top bits of its hash (so positions follow hash order at any size).
struct Directory {
    bits: u32,
    keys: Vec<u128>,
    ids: Vec<u32>,
    by_id: Vec<u128>,
}

impl Directory {
    fn new() -> Self {
        Self {
            bits: 10,
            keys: vec![0; 1 << 10],
            ids: vec![0; 1 << 10],
            by_id: Vec::new(),
        }
    }

    /// Ids the directory holds before it would grow.
    fn room(&self) -> usize {
        (1 << self.bits) / 5 * 4
    }

    /// Grows, before a batch, to room for `additional` new keys: growing
    /// in the middle of a sweep in hash order would crowd the swept part
    /// (measured: 20 times the probe steps).
    fn reserve(&mut self, additional: usize, hasher: &impl std::hash::BuildHasher) -> bool {
        if self.by_id.len() + additional <= self.room() {
            return false;
        }
        while self.by_id.len() + additional > self.room() {
            self.bits += 1;
        }
        self.keys = vec![0; 1 << self.bits];
        self.ids = vec![0; 1 << self.bits];
        let by_id = std::mem::take(&mut self.by_id);
        for (id, &key) in by_id.iter().enumerate() {
            let mut at = self.home(hasher.hash_one(key));
            while self.keys[at] != 0 {
                at = (at + 1) & ((1 << self.bits) - 1);
            }
            self.keys[at] = key;
            self.ids[at] = id as u32;
        }
        self.by_id = by_id;
        true
    }

    #[inline]
    fn home(&self, hash: u64) -> usize {
        (hash >> (64 - self.bits)) as usize
    }

    #[inline]
    fn prefetch(&self, hash: u64) {
        let at = self.home(hash);
        prefetch_line(self.keys.as_ptr().wrapping_add(at).cast());
        prefetch_line(self.ids.as_ptr().wrapping_add(at).cast());
    }

    /// The key's id, a new one for a new key (room reserved).
    #[inline]
    fn id(&mut self, key: u128, hash: u64) -> u32 {
        let mut at = self.home(hash);
        loop {
            if self.keys[at] == key {
                return self.ids[at];
            }
            if self.keys[at] == 0 {
                let id = self.by_id.len() as u32;
                self.keys[at] = key;
                self.ids[at] = id;
                self.by_id.push(key);
                return id;
            }
            at = (at + 1) & ((1 << self.bits) - 1);
        }
    }
}

/// One window start's dense state: per key id its count and result
/// timestamp (`i64::MIN`: no record yet), and the ids changed, in order.
struct DenseWindow {
    cells: HugeCells,
    changed: Vec<u32>,
}

/// Cells on huge pages (advised before first touched), as the kernels'
/// large tables are.
struct HugeCells {
    buf: Vec<(i64, i64)>,
    from: usize,
}

impl HugeCells {
    const EMPTY: (i64, i64) = (0, i64::MIN);

    fn new(len: usize) -> Self {
        const PAGE: usize = 2 << 20;
        // Room to align the start and round the end up to whole pages.
        let mut buf: Vec<(i64, i64)> = Vec::with_capacity(len + 2 * PAGE / 16);
        let addr = buf.as_mut_ptr() as usize;
        let aligned = addr.next_multiple_of(PAGE);
        let from = (aligned - addr).div_ceil(16);
        #[cfg(target_os = "linux")]
        // SAFETY: advises whole pages of memory this Vec owns.
        unsafe {
            let owned = (addr + buf.capacity() * 16 - aligned) / PAGE * PAGE;
            libc::madvise(
                aligned as *mut libc::c_void,
                (len * 16).next_multiple_of(PAGE).min(owned),
                libc::MADV_HUGEPAGE,
            );
        }
        buf.resize(from + len, Self::EMPTY);
        Self { buf, from }
    }

    fn grow(&mut self, len: usize) {
        let mut bigger = HugeCells::new(len);
        let old = &self.buf[self.from..];
        bigger.buf[bigger.from..bigger.from + old.len()].copy_from_slice(old);
        *self = bigger;
    }

    #[inline]
    fn prefetch(&self, id: u32) {
        prefetch_line(
            self.buf[self.from..]
                .as_ptr()
                .wrapping_add(id as usize)
                .cast(),
        );
    }

    #[inline]
    fn cell(&mut self, id: u32) -> &mut (i64, i64) {
        &mut self.buf[self.from + id as usize]
    }
}

#[inline]
fn prefetch_line(p: *const i8) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch never faults.
    unsafe {
        use core::arch::x86_64::{_MM_HINT_T0, _mm_prefetch};
        _mm_prefetch::<_MM_HINT_T0>(p);
    }
}

/// Live windows at most (a power of two): the yardstick's windows and
/// grace span fewer panes.
const RING: usize = 16;

/// Hash-order buckets of the sorted lookups.
const BUCKET_BITS: u32 = 8;

/// A third yardstick: a key directory (each key's dense id, one lookup
/// per record whatever its number of windows) and one dense array of
/// cells per window start indexed by id (a key's new window inserts
/// nothing, and a cell's address is known ahead, so its prefetch needs no
/// load of its own). The lookups run first over the whole batch, in
/// record order and prefetched; `STROM_WINDOW_PERF_SORTED=1` makes them
/// in the order of the directory's positions instead (the records
/// bucketed by their hashes' top bits), so that they sweep the directory
/// rather than miss at random. Prints the lookups' share of the time.
#[test]
#[ignore = "throughput measurement; run in release mode"]
fn directory_yardstick() {
    use std::hash::BuildHasher;
    let (calls, n_keys) = (YARDSTICK_CALLS, n_keys());
    let input = input(calls, n_keys);
    let (size, grace) = (YARDSTICK_SIZE, YARDSTICK_GRACE);
    let hasher = std::hash::BuildHasherDefault::<MixHasher>::default();
    let sorted = std::env::var_os("STROM_WINDOW_PERF_SORTED").is_some();
    let order = if sorted { "hash order" } else { "record order" };
    println!(
        "{RECORDS} records, {n_keys} keys, {calls} batches, a key directory (lookups in {order}) and dense windows:"
    );
    for (name, advance) in YARDSTICK_CASES {
        let per = size / advance;
        let mut seconds = Vec::new();
        let (mut results, mut captured, mut lookups) = (0, 0, f64::INFINITY);
        for _ in 0..RUNS {
            let mut directory = Directory::new();
            let mut ring: Vec<Option<DenseWindow>> = (0..RING).map(|_| None).collect();
            let mut oldest = i64::MAX; // the oldest live pane
            let mut closed: Vec<DenseWindow> = Vec::new();
            let (mut rows, mut starts, mut ends, mut values, mut stamps) =
                (Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new());
            let (mut words, mut hashes, mut parted, mut ids) = (
                Vec::new(),
                Vec::new(),
                Vec::<(u128, u64, u32)>::new(),
                Vec::new(),
            );
            let mut counts = vec![0_u32; (1 << BUCKET_BITS) + 1];
            let (mut stream_time, mut expired) = (-1_i64, 0_u64);
            // The pane of the last timestamp seen and its range, to skip
            // the divisions.
            let (mut pane_from, mut pane_to, mut pane) = (0_i64, -1_i64, 0_i64);
            results = 0;
            let clock = Stopwatch::start();
            let mut lookup_seconds = 0.0;
            for (b, keys) in input.keys.iter().enumerate() {
                let lookup_clock = Stopwatch::start();
                let column = keys.column();
                let n = column.len();
                let from = b * (RECORDS / calls);
                words.clear();
                hashes.clear();
                counts.fill(0);
                for i in 0..n {
                    let key = key_word(column.get(i).expect("a key"));
                    let hash = hasher.hash_one(key);
                    words.push(key);
                    hashes.push(hash);
                    counts[(hash >> (64 - BUCKET_BITS)) as usize + 1] += 1;
                }
                if directory.reserve(n, &hasher) {
                    for window in ring.iter_mut().flatten() {
                        window.cells.grow(directory.room());
                    }
                }
                ids.clear();
                ids.resize(n, 0_u32);
                if sorted {
                    for k in 1..counts.len() {
                        counts[k] += counts[k - 1];
                    }
                    parted.resize(n, (0, 0, 0));
                    for (i, (&key, &hash)) in words.iter().zip(&hashes).enumerate() {
                        let bucket = (hash >> (64 - BUCKET_BITS)) as usize;
                        parted[counts[bucket] as usize] = (key, hash, i as u32);
                        counts[bucket] += 1;
                    }
                    for (j, &(key, hash, i)) in parted.iter().enumerate() {
                        if let Some(&(_, ahead, _)) = parted.get(j + AHEAD) {
                            directory.prefetch(ahead);
                        }
                        ids[i as usize] = directory.id(key, hash);
                    }
                } else {
                    for i in 0..n {
                        if let Some(&ahead) = hashes.get(i + AHEAD) {
                            directory.prefetch(ahead);
                        }
                        ids[i] = directory.id(words[i], hashes[i]);
                    }
                }
                lookup_seconds += lookup_clock.seconds();
                let timestamps = &input.timestamps[from..from + n];
                for (i, &ts) in timestamps.iter().enumerate() {
                    if let Some(&ahead) = timestamps.get(i + AHEAD) {
                        let last = if (pane_from..=pane_to).contains(&ahead) {
                            pane
                        } else {
                            ahead / advance
                        };
                        for q in (last + 1 - per).max(0)..=last {
                            if let Some(window) = &ring[q as usize & (RING - 1)] {
                                window.cells.prefetch(ids[i + AHEAD]);
                            }
                        }
                    }
                    if ts > stream_time {
                        stream_time = ts;
                        let close = stream_time - grace;
                        while oldest != i64::MAX && oldest * advance + size <= close {
                            closed.extend(ring[oldest as usize & (RING - 1)].take());
                            oldest += 1;
                            if ring[oldest as usize & (RING - 1)].is_none() {
                                oldest = i64::MAX;
                            }
                        }
                    }
                    let close = stream_time - grace;
                    if !(pane_from..=pane_to).contains(&ts) {
                        pane = ts / advance;
                        pane_from = pane * advance;
                        pane_to = pane_from + advance - 1;
                    }
                    for p in (pane + 1 - per).max(0)..=pane {
                        let start = p * advance;
                        if start + size <= close {
                            expired += 1;
                            continue;
                        }
                        let window =
                            ring[p as usize & (RING - 1)].get_or_insert_with(|| DenseWindow {
                                cells: HugeCells::new(directory.room()),
                                changed: Vec::new(),
                            });
                        oldest = oldest.min(p);
                        let cell = window.cells.cell(ids[i]);
                        if *cell == HugeCells::EMPTY {
                            window.changed.push(ids[i]);
                            *cell = (1, ts);
                        } else {
                            cell.0 += 1;
                            cell.1 = cell.1.max(ts);
                        }
                        rows.push((from + i) as u32);
                        starts.push(start);
                        ends.push(start + size);
                        values.push(cell.0);
                        stamps.push(cell.1);
                    }
                }
                results += rows.len();
                for column in [&mut starts, &mut ends, &mut values, &mut stamps] {
                    column.clear();
                }
                rows.clear();
            }
            seconds.push(clock.seconds());
            lookups = lookups.min(lookup_seconds);
            captured = closed.iter().map(|w| w.changed.len()).sum::<usize>();
            assert_eq!(expired, 0, "the input has no late records");
            assert_eq!(directory.by_id.len() as u64, n_keys, "one id a key");
        }
        let counted = format!(
            "lookups {:.1} ns a record; {results} results, {captured} changes in closed windows",
            lookups * 1e9 / RECORDS as f64
        );
        report_yardstick(name, &seconds, &counted);
    }
}
