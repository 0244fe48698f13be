//! Throughput check of the embedded log's hot paths (not a benchmark suite).
//!
//! `cargo test --release -p strom-core --test log_perf -- --ignored --nocapture`

use std::time::Instant;

use strom_core::log::{Log, RecordBatchBuilder, TopicConfig};

const RECORDS: usize = 2_000_000;
const BATCH: usize = 10_000;

#[test]
#[ignore = "throughput check; run in release mode"]
fn append_and_read_throughput() {
    let dir = tempfile::tempdir().unwrap();
    let log = Log::open(dir.path()).unwrap();
    log.create_topic("perf", TopicConfig::new(1)).unwrap();
    let value = [b'v'; 100];
    let mut builder = RecordBatchBuilder::with_capacity(BATCH, BATCH * 110);

    let mut encode = std::time::Duration::ZERO;
    let started = Instant::now();
    for b in 0..RECORDS / BATCH {
        let t = Instant::now();
        builder.clear();
        for i in 0..BATCH {
            let key = ((b * BATCH + i) as u64).to_be_bytes();
            builder.push(1_700_000_000_000, Some(&key), Some(&value), &[]);
        }
        encode += t.elapsed();
        log.append("perf", 0, &builder).unwrap();
    }
    let append = started.elapsed();
    let t = Instant::now();
    log.flush().unwrap();
    let flush = t.elapsed();

    let started = Instant::now();
    let (mut offset, mut records, mut bytes) = (0, 0, 0);
    while records < RECORDS {
        let batch = log.read("perf", 0, offset, BATCH, usize::MAX).unwrap();
        records += batch.len();
        bytes += batch.values.iter().map(|v| v.unwrap().len).sum::<usize>();
        offset = batch.next_offset;
    }
    let read = started.elapsed();
    assert_eq!(bytes, RECORDS * 100);

    let rate = |d: std::time::Duration| RECORDS as f64 / d.as_secs_f64() / 1e6;
    println!(
        "append (encode + write): {:.2} M records/s (encode alone {:.2} M/s); flush {flush:?}",
        rate(append),
        rate(encode)
    );
    println!("read: {:.2} M records/s", rate(read));
}
