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
//! the kernels' work without the slot misses).

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

fn run<A, C>(name: &str, agg: &A, windows: TimeWindows, batches: &[Batch<'_, C>])
where
    A: Aggregate,
    C: ValueColumn<Value = A::Value>,
{
    let mut out = WindowedResults::new();
    let mut seconds = Vec::new();
    let mut changes = 0;
    for _ in 0..RUNS {
        let mut p =
            TimeWindowedAggregation::new(agg.clone(), windows, EmitStrategy::OnWindowUpdate);
        let (t, cpu) = (Instant::now(), thread_cpu_seconds());
        for batch in batches {
            p.process_into(batch, 0, &mut out);
        }
        seconds.push(match (cpu, thread_cpu_seconds()) {
            (Some(from), Some(to)) => to - from,
            _ => t.elapsed().as_secs_f64(),
        });
        changes = p.drain_changes().len();
    }
    let best = seconds.iter().copied().fold(f64::INFINITY, f64::min);
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
    let n_keys: u64 = std::env::var("STROM_WINDOW_PERF_KEYS").map_or(100_000, |k| {
        k.parse().expect("STROM_WINDOW_PERF_KEYS is a number")
    });
    let input = input(calls, n_keys);
    let tumbling = TimeWindows::of_size_and_grace(60_000, 5_000).unwrap();
    let hopping = tumbling.advance_by(15_000).unwrap();
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
