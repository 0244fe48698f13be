//! Windowing: window specs, window assignment, grace, and the native
//! kernels of windowed aggregations (Kafka's `KStreamWindowAggregate`,
//! `KStreamSlidingWindowAggregate`, `KStreamSessionWindowAggregate`) for the
//! built-in aggregations ([`aggregate`]: count, sum, min, max, mean).
//!
//! Each kernel is one processor's state (one per task and node) and takes a
//! whole columnar batch per call ([`column::Batch`]), looping over it in
//! offset order so that its results equal Kafka Streams' record-at-a-time
//! results with caching disabled: the processor's own observed stream time,
//! grace drops, result timestamps, emission order. Results come back
//! columnar ([`results::WindowedResults`]) with the store writes that back
//! them ([`results::StoreChanges`]).
//!
//! # Design
//!
//! - **State.** A kernel keeps the windows (sessions) that can still change
//!   in its own memory and reports the store writes; it does not read and
//!   write a [`crate::store::WindowStore`] per record (a store get and put
//!   per record runs at a small fraction of the target rate). The caller
//!   applies the changes to the window or session store and its changelog
//!   (`write_changes`), commits the kernel's times with the offsets, and
//!   after a restart hands both back (`restore_times`, `restore_from_store`);
//!   the tests check that restarting after every batch changes no result.
//!   Time windows leave memory as soon as they close (in final mode, once
//!   emitted; in update mode a closed table most of whose windows changed
//!   since the last drain waits whole for the drain, which copies them
//!   out); the store keeps them for its retention.
//! - **Time windows** live in one hash table per window start
//!   ([`time`]): closing a window drops its table whole; a slot is half a
//!   cache line (a whole one for states over 8 bytes) with keys of up to 15
//!   bytes inline and no hash, found through a byte array of tag
//!   fingerprints compared 16 at a time, and the exact slot is prefetched a
//!   few rows ahead (its fingerprints twice as far ahead); large slot arrays
//!   sit on huge pages. Measured with `tests/window_perf.rs`
//!   (10M records, 100k keys, one batch, shared 2-core VM, best of three)
//!   before the fingerprints: tumbling count and sum about 22M records/s,
//!   hopping with 4 windows per record about 5-6M records/s; single runs
//!   vary by up to 2x with the machine's load. The fingerprints and huge
//!   pages measured 1.2-1.9x on tumbling and 1.4-1.7x on hopping through
//!   the binding (`benches/test_window_kernels.py`, alternated with the
//!   previous build on a machine at load 4-7). Comparing 16 fingerprints
//!   at once (the byte-at-a-time probe walks were half the tumbling
//!   kernel's time) and prefetching the fingerprints (several tables'
//!   worth no longer stay in cache) measured 1.05-1.24x on tumbling and
//!   1.23-1.31x on hopping, 100 calls of 100k records over 100k keys,
//!   thread CPU time, alternated at load 11-14: 18M and 5M records/s.
//!   With 1,000 keys, all in cache, 41M and 13M: at 100k keys a tumbling
//!   record pays about 20 ns of memory stalls on top of 24 ns of work, a
//!   hopping record about 120 ns for its four slot lines. On a quiet
//!   machine (load 1-2, `pytest benches/test_window_kernels.py
//!   --benchmark-enable -k native`, 2026-11-26): tumbling count 20.3M
//!   records/s, hopping x4 count 6.3M (100 calls of 100k; one call of 10M
//!   17.7M and 5.1M). The slot prefetch's probe is not walked again: it
//!   leaves a hint (the slot where the probe ended, valid while the table
//!   neither grows nor is reused), and the record's lookup checks that
//!   slot first: hopping x4 +8-12% through the binding (6 of 7 alternated
//!   pairs faster, load 3-8), tumbling unchanged (within +-2%).
//!   Where the time goes (perf, 100 calls of 100k): the binding is a few
//!   per cent; with 1,000 keys (all in cache) tumbling runs at 42M
//!   records/s (24 ns, spread over hashing, two prefetch passes, the
//!   probe, the update and five result columns, none above a tenth) and
//!   hopping at 14M (18 ns per window update); 100k keys add about 18 ns
//!   per tumbling record and 25 ns per hopping window in slot misses,
//!   which prefetch distance (8 to 28 rows) does not change. What would
//!   go further: fewer instructions per update (tumbling's in-cache cost
//!   alone is 24 of the 25 ns that 40M records/s allows; a ring of each
//!   key's windows did not help hopping, see below).
//!   The slot cost follows the table's size against the 2 MiB L2 cache:
//!   with 64-byte slots, tumbling ran at 31.5M records/s over 25k keys (2
//!   MiB tables), 28.8M over 50k, 21.5M over 100k (8 MiB). Slots of 32
//!   bytes (no hash kept, keys of up to 15 bytes inline, the dirty flag in
//!   the length byte) halve the tables for states of up to 8 bytes:
//!   through the binding (100 calls of 100k over 100k keys, thread CPU,
//!   alternated with the previous build at load 7-9) tumbling count
//!   18.7-22.4M -> 23.6-26.2M records/s, hopping x4 5.1-5.8M -> 5.8-6.4M
//!   (with the change below; at load 4: 21.6-23.2M -> 23.0-25.3M and
//!   5.4-5.7M -> 6.0-6.6M).
//!   Indexing the slot arrays without a branch on where they live (heap
//!   or mapping) took the in-cache case (1,000 keys, `window_perf`) from
//!   40M to 43-45M and 13M to 15-16M; at 100k keys it is within the noise.
//!   Tried and dropped: looking a record's next window up at the next
//!   table position first (hopping 20% slower in `window_perf`); no
//!   fingerprint prefetch (tumbling unchanged, hopping 13% slower). Where
//!   a 100k-key record waits now (perf): on the prefetches themselves and
//!   the fingerprint group load behind them, i.e. on memory parallelism,
//!   with a 4 MiB table still twice the L2 cache; hopping's four tables
//!   make four such misses per record.
//!   The per-key ring was built and measured (2026-11-26, not kept): in
//!   update mode with windows that fit, one table keyed once per key whose
//!   192-byte slot holds six windows (start, timestamp, state; a dirty bit
//!   each), a list of changed slots per live start (drained in slot
//!   order), keys without a live window dropped when the table would
//!   grow. All the Rust window tests passed on it. Hopping x4 at 100k keys
//!   (`window_perf`, 100 batches, alternated with the tables): 6.2-6.6M
//!   against 4.8-6.5M records/s, the same within the noise; at 1,000 keys
//!   10.6-13.2M against 8.2-12.1M. A record still reads three lines of its
//!   slot (the key's and those of its four cells), and the time went to
//!   the prefetches waiting for free fill buffers as before: the tables'
//!   four 32-byte slots and the ring's 192 bytes cost alike. What is left
//!   for hopping is per window update (about 20 ns in cache: four results
//!   of five columns per record and the change tracking), not the lookups.
//!   Skipping the results' writes altogether (a throwaway build, 1,000
//!   keys, three alternated pairs on a loaded machine) made the counts
//!   1.25-1.5x (tumbling) and 1.35-1.45x (hopping) faster, the sums
//!   0.8-1.45x (noise): the bound of any cheaper result layout, short of
//!   the 40M and 15M bars on its own.
//!   Splitting a kernel's windows into shards by key hash, one thread per
//!   shard, was built and measured (2026-11-27, not kept): every shard
//!   reads the whole batch (drops, stream time and each record's number of
//!   results follow from the records alone, so each knows where every
//!   result goes), updates the windows of its own keys and writes their
//!   results in place; all the Rust window tests passed on it. On the
//!   2-vCPU VMs these benchmarks run on, two busy threads each run at
//!   about 0.6x of one alone (two processes running only the preparing
//!   loop: 58M records/s each, against 96M alone, thread CPU time), as
//!   hyperthreads of one core do, so two shards gave tumbling 0.8-1.2x
//!   and hopping 1.2-1.5x in wall time (`window_perf`, 100 batches,
//!   alternated), for more CPU time; without the result writes the same.
//!   Not worth its unsafe in-place writes here; on machines with cores of
//!   their own it is the step that scales, and it would want each shard to
//!   write its results to a buffer of its own and a gather pass (results
//!   of neighbouring records belong to different shards, so in-place
//!   writes share cache lines between the threads).
//!   A yardstick (`bare_hash_map_yardstick` in `tests/window_perf.rs`,
//!   2026-11-27): hashbrown maps, one per window start, doing a count's
//!   work per record (key load and hash, probe, count and timestamp, the
//!   changed windows listed once, closed windows' changes captured, five
//!   result columns) in a bare loop with no prefetching. Alternated with
//!   the kernel (100 batches, same records): in cache (1,000 keys) the
//!   bare loop runs tumbling at 46-61M records/s against the kernel's
//!   22-29M, hopping x4 at 14.5-18.7M against 8-11M; at 100k keys it falls
//!   to 9.7-10.8M and 2.4-2.5M, where the kernel runs 15-16M and 5.7-6.3M
//!   (this VM at its slower speed). So the prefetches are what keep 100k
//!   keys near in-cache speed, and the kernel's loop does about twice the
//!   work of a bare one in cache, where a leaner loop gains. At 100k keys
//!   it does not: knocking out the kernel's prefetches made it 10% faster
//!   in cache and 1.6x slower at 100k keys; writing its results through
//!   raw pointers instead of pushes, 10-15% faster in cache and no faster
//!   at 100k keys (nor were the steps kept below); where its time goes
//!   instead is measured further down. (A first, throwaway
//!   yardstick ran 32-36 ns a record at 100k keys, with keys all nine
//!   bytes and a one-round hash; with the kernel's hash or the benchmark's
//!   keys it ran as above: that figure measured its hash, not the
//!   machine.)
//!   Two steps from that comparison were kept (2026-11-27): tables whose
//!   slots fit in half an L2 cache (512 KiB, `with_prefetch_above`) are no
//!   longer prefetched, and updates append without the per-result checks
//!   for owned keys and tombstones (`push_update`). At 1,000 keys
//!   (`window_perf`, 100 batches, alternated with the previous build)
//!   tumbling count 32-34M -> 35-41M records/s, hopping x4 8-12M ->
//!   11-14M; at 100k keys, where the prefetches stay, unchanged within the
//!   noise (also through the binding: 396-456 ms a round either way).
//!   Where the 100k-key time goes, measured (2026-11-27, `window_perf`,
//!   100 batches, counts, alternated within minutes):
//!   - the table's misses are a small part. A throwaway C loop doing one
//!     random read-modify-write per record in a 4 MiB array, prefetched 16
//!     records ahead, with five 8-byte result columns written per record,
//!     ran 11.4 ns a record against 6.4 ns with a 32 KiB array (its
//!     unprefetched single-chain latency at 4 MiB: 148 ns): these VMs hide
//!     such misses well when the prefetch address needs no load of its
//!     own. Prefetching the slot at the key's home position, with no
//!     control-byte load in the prefetch pass, did not change the kernel
//!     (tumbling 17.1-21.0M against 17.9-21.2M records/s). With few new
//!     windows (below) 100k keys ran tumbling at 22.6-23.2M against
//!     27.8-31.3M over 1,000 keys: the misses, about 8 ns a record;
//!   - most of the difference to 1,000 keys is per window of a key: the
//!     first record of a key in a window inserts it, and the window's close
//!     copies its change out (`capture_first_dirty`, into the changes kept
//!     until the caller drains them; the benchmarks never drain, so that
//!     list grows through the run). At 100k keys and 60 s windows that is
//!     one record in six for tumbling and two window updates in three for
//!     hopping. With 600 s windows (the same 100k keys and tables, a tenth
//!     of the inserts and closes) tumbling ran 22.6-23.2M against
//!     16.9-18.1M records/s and hopping 8.0-8.1M against 4.2-4.7M; without
//!     the close's copy (a knock-out) 60 s windows ran tumbling 17.7-25.5M
//!     against 17.0-20.2M and hopping 6.5-7.0M against 5.1-6.0M. So a key's
//!     window costs about 100 ns beyond its updates, about half in the
//!     close's copy and half in the insert. Reserving the copy's room once
//!     and copying keys whole (no `memcpy` call per key) did not change it
//!     (tumbling 18.9-21.4M against 20.5-23.4M, hopping 5.0-6.3M against
//!     5.5-6.1M): the growing list's fresh pages, not the copying, are the
//!     cost, and a caller that drains every batch reuses the allocator's.
//!   - the close's copy was then taken out of the loop (2026-11-27, 13:00):
//!     a closed table most of whose slots changed since the last drain
//!     (the common case: every key comes back in every window) is kept
//!     whole until the caller drains, and the drain copies its changes out
//!     in slot order, as it copies the live tables'; a sparse one is still
//!     copied at once and reused. A caller that drains every batch does
//!     the same copies as before, one batch later at most; one that drains
//!     less often keeps 32-byte slots instead of a growing list of
//!     changes (about 57 bytes each). `window_perf`, 100 batches, 100k
//!     keys, alternated with the previous build: tumbling count 25.3-25.8M
//!     -> 29.4-29.5M records/s, hopping x4 7.0M -> 8.0-8.7M; through the
//!     binding (100 calls of 100k, thread CPU, three alternated pairs)
//!     23.3-25.6M -> 27.4-28.2M and 6.6-6.8M -> 7.7-8.3M. With 600 s
//!     windows (a tenth of the new windows) the previous build ran 31.7-32.9M
//!     and 12.0M: the new windows' inserts are what is left of their cost.
//!     Draining after every batch (`STROM_WINDOW_PERF_DRAIN=1`, as the DSL
//!     node does) costs 14-19M and 3.6-4.0M either way: that copy is the
//!     store write Kafka's update mode makes for every changed window.
//!     Writing those changes into a window store costs more than the
//!     kernel (`benches/test_window_kernels.py::
//!     test_native_windowed_count_into_store`, tumbling, 6.3M writes for
//!     10M records): 0.38 s of processing, then 1.0 s of writes into a
//!     persistent store, 2.1-2.3 s into an in-memory one (3.4-3.8 s before
//!     its segments took batches in key order and kept key heads inline).
//!     The store writes are where a DSL windowed count's native time goes.
//!   - in cache (1,000 keys), a fifth of the tumbling loop's samples wait
//!     on the slot load that follows the control bytes' match. Probing 16
//!     rows ahead there too (the hints without prefetch instructions), so
//!     that the record's lookup starts at its slot, was 5-10% slower
//!     (three alternated pairs, 2026-11-27): the extra pass costs more than
//!     the shorter chain saves.
//!   - what is left is the in-cache loop (30-40M records/s tumbling). So
//!     the bars (40M, 15M at 100k keys) would want a new window of a key to
//!     cost no more than an update, and the in-cache loop about a third
//!     cheaper; `STROM_WINDOW_PERF_CASES` runs one case for a profile.
//!   - a ring of panes per key (`pane_ring_yardstick` in
//!     `tests/window_perf.rs`, 2026-11-27): one slot per key (two cache
//!     lines) holds the counts and latest timestamps of its last eight
//!     panes (windows of the advance's length), so a record makes one
//!     lookup and one update whatever its number of windows, a key's new
//!     window inserts nothing, and a window's result is the sum of its
//!     panes (exact for counts and integer sums only). A bare loop, alternated
//!     twice with the kernel (100 batches): at 1,000 keys it runs tumbling
//!     at 53-54M records/s and hopping x4 at 25M (the kernel: 43-44M and
//!     15M); at 100k keys 25-26M and 10-10.5M (the kernel: 30-30.5M and
//!     8.5M). Knocking out its captured changes gives 26M and 11.5M, and
//!     its result writes as well 30-31M and 13M; a one-line slot (no
//!     timestamps, a throwaway build) with neither, 31M and 16M. `perf`
//!     puts half of that last loop's samples on the slot's prefetch
//!     instruction and its first load: the misses, not the work, at 100k
//!     keys. So a pane ring would make hopping about 1.2x faster before
//!     Kafka's bookkeeping (late records, restore, old values, final
//!     mode) is added back, and tumbling slower (two lines a key against
//!     the kernel's 32-byte slots); not built. Its slots of 128 bytes in
//!     a table of twice the keys (32 MiB) miss far more than the C loop's
//!     4 MiB array above: the tumbling bar wants the kernel's small slots
//!     and a leaner in-cache loop, not fewer lookups.
//!   - a key directory with dense windows (`directory_yardstick`,
//!     2026-11-27, evening): each record finds its key's dense id once,
//!     whatever its number of windows, and each window start keeps one
//!     array of 16-byte cells (count, timestamp) indexed by id, so a key's
//!     new window inserts nothing and a cell's prefetch needs no load of
//!     its own; the cells sit on huge pages, as the tables do. A bare
//!     loop, alternated three times with the kernel (100 batches): at 100k
//!     keys tumbling 29-35M records/s (the kernel: 28-29M) and hopping x4
//!     12.4-13.0M (the kernel: 7.3-7.7M); at 1,000 keys 43M and 20.5M
//!     (the kernel: 42M and 14.7M). The lookups alone (hash, probe and
//!     id, prefetched 16 records ahead) take 14-18 ns a record at 100k
//!     keys against 6-7 ns in cache, of the
//!     25 ns that 40M records/s allows in all. Looking the keys up in hash
//!     order instead (the records bucketed by their hashes' top 8 bits,
//!     so that the lookups sweep the directory) was slower, 20-25 ns: the
//!     bucketing costs more than the misses it saves. A directory grown in
//!     the middle of such a sweep crowded its swept part (31.7 extra probe
//!     steps a lookup against 1.6), so it grows before a batch. A key's
//!     cells side by side in one array (lanes of 4 or 8 per id, a
//!     throwaway build) were slower still: tumbling 22-24M, hopping
//!     10.6-10.9M, the closes copying their cells out before the lanes
//!     are reused. In the kernel the directory would keep keys that no
//!     live window holds (needing a compaction that remaps the ids of
//!     every live window), and a dense array costs as much for a window of
//!     a few keys as for a full one; for hopping x4 at 100k keys it would
//!     give about 1.5x before Kafka's bookkeeping, short of 15M. Not built.
//! - **Store visibility is Kafka's.** Kafka reads windows back through its
//!   store, whose retention hides old windows; the kernels emulate what the
//!   default stores show, so that, as in Kafka, final results of windows the
//!   store already hides are never emitted ([`BatchStats::expired_before_emit`]
//!   counts them; Kafka's own `TimeWindowedKStreamIntegrationTest` expects
//!   these gaps), and a session one gap back at the store's time is not
//!   merged under the default retention. A longer retention avoids both.
//! - **Drops.** Records with a null key, or a null value for aggregations of
//!   the value (and for any sliding-window aggregation, as Kafka), or a
//!   negative timestamp are skipped before stream time advances; late
//!   records count once per closed window they miss (Kafka's
//!   `dropped-records`, see [`BatchStats`]).
//! - **Bindings.** `strom._core.Native{Time,Sliding,Session}WindowedAggregation`
//!   (`rust/python/src/window/`) wrap the kernels for Python and
//!   Spark; the DSL's node (`strom.kstream.internals.native_window`) applies the
//!   store changes after each batch. For Kafka's `sendOldValues` and for a
//!   caller that writes every update through a record cache, time windows
//!   can also return each update's previous result and its encoded state
//!   ([`WindowedResults::old_values`], [`WindowedResults::encoded_states`]).
//! - **Final results** ([`EmitStrategy::OnWindowClose`]) are looked for at
//!   most once per emit interval of the wall-clock time given with each
//!   batch (Kafka's default 1 s; Kafka's test driver uses 0), in the order
//!   of Kafka's time-ordered stores.

pub mod aggregate;
pub mod assign;
pub mod column;
mod huge;
pub(crate) mod keys;
pub mod results;
pub mod session;
pub mod sliding;
pub mod spec;
mod table;
pub mod time;

pub(crate) use table::prefetch_read;

pub use aggregate::{Aggregate, Count, KafkaValue, Max, Mean, MeanState, Min, Num, Sum};
pub use column::{Batch, BinaryBuffer, BinaryColumn, NoValues, Validity, ValueColumn, Values};
pub use results::{BatchStats, ResultKeys, StoreChanges, WindowedResults};
pub use session::SessionWindowedAggregation;
pub use sliding::SlidingWindowedAggregation;
pub use spec::{
    DEFAULT_EMIT_INTERVAL_MS, EmitStrategy, NO_TIMESTAMP, SessionWindows, SlidingWindows,
    TimeWindows,
};
pub use time::TimeWindowedAggregation;

#[cfg(test)]
mod tests {
    use super::*;

    /// Kernels move between the bindings' threads.
    #[test]
    fn kernels_are_send() {
        fn send<T: Send>() {}
        send::<TimeWindowedAggregation<Count>>();
        send::<TimeWindowedAggregation<Mean<f64>>>();
        send::<SlidingWindowedAggregation<Sum<i64>>>();
        send::<SessionWindowedAggregation<Max<f64>>>();
        send::<WindowedResults<f64>>();
        send::<StoreChanges<MeanState>>();
    }
}
