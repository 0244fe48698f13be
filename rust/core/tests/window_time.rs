//! Tumbling and hopping windowed aggregation, against the cases of Kafka's
//! `KStreamWindowAggregateTest` (Kafka 4.0, `streams/src/test/.../kstream/
//! internals/`) and a brute-force model of `KStreamWindowAggregate` over a
//! plain map standing in for the window store.
//!
//! Kafka's tests aggregate strings ("0+1+1": initializer "0", one "+v" per
//! record); here the same inputs run through `count()` and `sum()`, and the
//! expected results are derived from Kafka's strings.

mod window_support;

use std::collections::BTreeMap;

use strom_core::store::InMemoryWindowStore;
use strom_core::window::{
    Aggregate, Count, EmitStrategy, Max, Mean, Min, NO_TIMESTAMP, Sum, TimeWindowedAggregation,
    TimeWindows,
};
use window_support::{
    OwnedBatch, Rec, Rng, kafka_count, kafka_sum, kvts, kvts_final, rec, rows, rows_final,
};

type Expected<'a> = [(&'a str, i64, i64, &'a str, i64)];

fn hopping(size: i64, advance: i64, grace: i64) -> TimeWindows {
    TimeWindows::of_size_and_grace(size, grace)
        .unwrap()
        .advance_by(advance)
        .unwrap()
}

/// Runs `records` (value = the digit Kafka's test pipes) through a count and
/// a sum, one batch each, and checks both against Kafka's expected strings.
fn check_count_and_sum(
    windows: TimeWindows,
    emit: EmitStrategy,
    retention: Option<i64>,
    records: &[Rec<i64>],
    expected: &Expected<'_>,
) {
    let batch = OwnedBatch::new(records);
    let mut count = TimeWindowedAggregation::new(Count, windows, emit)
        .with_emit_interval(0)
        .unwrap();
    let mut sum = TimeWindowedAggregation::new(Sum::<i64>::new(), windows, emit)
        .with_emit_interval(0)
        .unwrap();
    if let Some(r) = retention {
        count = count.with_retention(r).unwrap();
        sum = sum.with_retention(r).unwrap();
    }
    let counted = kvts(&count.process(&batch.counts(), 0), &batch);
    let summed = kvts(&sum.process(&batch.values(), 0), &batch);
    let want_count: Vec<_> = expected
        .iter()
        .map(|&(k, s, e, agg, ts)| (k.to_string(), s, e, Some(kafka_count(agg)), ts))
        .collect();
    let want_sum: Vec<_> = expected
        .iter()
        .map(|&(k, s, e, agg, ts)| (k.to_string(), s, e, Some(kafka_sum(agg)), ts))
        .collect();
    assert_eq!(counted, want_count);
    assert_eq!(summed, want_sum);
}

fn agg_basic_input() -> Vec<Rec<i64>> {
    [
        ("A", 1, 0),
        ("B", 2, 1),
        ("C", 3, 2),
        ("D", 4, 3),
        ("A", 1, 4),
        ("A", 1, 5),
        ("B", 2, 6),
        ("D", 4, 7),
        ("B", 2, 8),
        ("C", 3, 9),
        ("A", 1, 10),
        ("B", 2, 11),
        ("D", 4, 12),
        ("B", 2, 13),
        ("C", 3, 14),
        ("B", 1, 3),
        ("B", 2, 2),
        ("B", 3, 9),
    ]
    .iter()
    .map(|&(k, v, ts)| rec(k, v, ts))
    .collect()
}

/// KStreamWindowAggregateTest.testAggBasic (`ON_WINDOW_UPDATE`, no cache):
/// size 10, advance 5, grace 100.
#[test]
fn kafka_agg_basic_on_window_update() {
    let expected: &Expected<'_> = &[
        ("A", 0, 10, "0+1", 0),
        ("B", 0, 10, "0+2", 1),
        ("C", 0, 10, "0+3", 2),
        ("D", 0, 10, "0+4", 3),
        ("A", 0, 10, "0+1+1", 4),
        ("A", 0, 10, "0+1+1+1", 5),
        ("A", 5, 15, "0+1", 5),
        ("B", 0, 10, "0+2+2", 6),
        ("B", 5, 15, "0+2", 6),
        ("D", 0, 10, "0+4+4", 7),
        ("D", 5, 15, "0+4", 7),
        ("B", 0, 10, "0+2+2+2", 8),
        ("B", 5, 15, "0+2+2", 8),
        ("C", 0, 10, "0+3+3", 9),
        ("C", 5, 15, "0+3", 9),
        ("A", 5, 15, "0+1+1", 10),
        ("A", 10, 20, "0+1", 10),
        ("B", 5, 15, "0+2+2+2", 11),
        ("B", 10, 20, "0+2", 11),
        ("D", 5, 15, "0+4+4", 12),
        ("D", 10, 20, "0+4", 12),
        ("B", 5, 15, "0+2+2+2+2", 13),
        ("B", 10, 20, "0+2+2", 13),
        ("C", 5, 15, "0+3+3", 14),
        ("C", 10, 20, "0+3", 14),
        ("B", 0, 10, "0+2+2+2+1", 8),
        ("B", 0, 10, "0+2+2+2+1+2", 8),
        ("B", 0, 10, "0+2+2+2+1+2+3", 9),
        ("B", 5, 15, "0+2+2+2+2+3", 13),
    ];
    check_count_and_sum(
        hopping(10, 5, 100),
        EmitStrategy::OnWindowUpdate,
        None,
        &agg_basic_input(),
        expected,
    );
}

/// KStreamWindowAggregateTest.testAggBasic (`ON_WINDOW_CLOSE`): nothing
/// closes within the 100 ms grace.
#[test]
fn kafka_agg_basic_on_window_close() {
    check_count_and_sum(
        hopping(10, 5, 100),
        EmitStrategy::OnWindowClose,
        None,
        &agg_basic_input(),
        &[],
    );
}

/// KStreamWindowAggregateTest.testJoin, the first table's results
/// (processEmitUpdateJoin, grace 100).
#[test]
fn kafka_join_input_on_window_update() {
    let w = hopping(10, 5, 100);
    let mut p = TimeWindowedAggregation::new(Count, w, EmitStrategy::OnWindowUpdate);
    let first: Vec<_> = [
        ("A", 1, 0),
        ("B", 2, 1),
        ("C", 3, 2),
        ("D", 4, 3),
        ("A", 1, 9),
    ]
    .iter()
    .map(|&(k, v, t)| rec(k, v, t))
    .collect();
    let got = {
        let b = OwnedBatch::new(&first);
        kvts(&p.process(&b.counts(), 0), &b)
    };
    let want: &Expected<'_> = &[
        ("A", 0, 10, "0+1", 0),
        ("B", 0, 10, "0+2", 1),
        ("C", 0, 10, "0+3", 2),
        ("D", 0, 10, "0+4", 3),
        ("A", 0, 10, "0+1+1", 9),
        ("A", 5, 15, "0+1", 9),
    ];
    assert_eq!(got, counts(want));
    let second: Vec<_> = [
        ("A", 1, 5),
        ("B", 2, 6),
        ("D", 4, 7),
        ("B", 2, 8),
        ("C", 3, 9),
    ]
    .iter()
    .map(|&(k, v, t)| rec(k, v, t))
    .collect();
    let got = {
        let b = OwnedBatch::new(&second);
        kvts(&p.process(&b.counts(), 0), &b)
    };
    let want: &Expected<'_> = &[
        ("A", 0, 10, "0+1+1+1", 9),
        ("A", 5, 15, "0+1+1", 9),
        ("B", 0, 10, "0+2+2", 6),
        ("B", 5, 15, "0+2", 6),
        ("D", 0, 10, "0+4+4", 7),
        ("D", 5, 15, "0+4", 7),
        ("B", 0, 10, "0+2+2+2", 8),
        ("B", 5, 15, "0+2+2", 8),
        ("C", 0, 10, "0+3+3", 9),
        ("C", 5, 15, "0+3", 9),
    ];
    assert_eq!(got, counts(want));
}

fn counts(want: &Expected<'_>) -> Vec<(String, i64, i64, Option<i64>, i64)> {
    want.iter()
        .map(|&(k, s, e, agg, ts)| (k.to_string(), s, e, Some(kafka_count(agg)), ts))
        .collect()
}

/// KStreamWindowAggregateTest.testJoin, the first table's final results
/// (processEmitFinalJoin, grace 5): emitted by window start, then key.
#[test]
fn kafka_join_input_on_window_close() {
    let w = hopping(10, 5, 5);
    let mut p = TimeWindowedAggregation::new(Count, w, EmitStrategy::OnWindowClose)
        .with_emit_interval(0)
        .unwrap();
    let first: Vec<_> = [
        ("A", 1, 0),
        ("B", 2, 1),
        ("C", 3, 2),
        ("D", 4, 3),
        ("A", 1, 9),
        ("A", 1, 15),
    ]
    .iter()
    .map(|&(k, v, t)| rec(k, v, t))
    .collect();
    let got = p.process(&OwnedBatch::new(&first).counts(), 0);
    let want: &Expected<'_> = &[
        ("A", 0, 10, "0+1+1", 9),
        ("B", 0, 10, "0+2", 1),
        ("C", 0, 10, "0+3", 2),
        ("D", 0, 10, "0+4", 3),
    ];
    assert_eq!(kvts_final(&got), counts(want));
    // Emitted while processing the record at 15 (row 5).
    assert!(got.rows.iter().all(|&r| r == 5));
    assert_eq!(got.stats.emitted_final, 4);
    let second: Vec<_> = [
        ("A", 1, 10),
        ("B", 2, 11),
        ("D", 4, 12),
        ("B", 2, 13),
        ("C", 3, 14),
        ("A", 1, 20),
    ]
    .iter()
    .map(|&(k, v, t)| rec(k, v, t))
    .collect();
    let got = {
        let b = OwnedBatch::new(&second);
        kvts(&p.process(&b.counts(), 0), &b)
    };
    let want: &Expected<'_> = &[
        ("A", 5, 15, "0+1+1", 10),
        ("B", 5, 15, "0+2+2", 13),
        ("C", 5, 15, "0+3", 14),
        ("D", 5, 15, "0+4", 12),
    ];
    assert_eq!(got, counts(want));
}

fn expired_window_input(timestamps: &[i64]) -> Vec<Rec<i64>> {
    timestamps.iter().map(|&t| rec("k", t, t)).collect()
}

/// KStreamWindowAggregateTest.shouldLogAndMeterWhenSkippingExpiredWindow:
/// size 10, advance 5, grace 90, retention 100; seven late records dropped.
#[test]
fn kafka_skipping_expired_window() {
    let input = expired_window_input(&[100, 0, 1, 2, 3, 4, 5, 6, 105, 106]);
    let batch = OwnedBatch::new(&input);
    let w = hopping(10, 5, 90);
    let mut upd = TimeWindowedAggregation::new(Count, w, EmitStrategy::OnWindowUpdate)
        .with_retention(100)
        .unwrap();
    let got = upd.process(&batch.counts(), 0);
    assert_eq!(got.stats.dropped_expired, 7);
    assert_eq!(got.stats.dropped_records(), 7);
    // Kafka's expected strings are "+v" (initializer ""), one per record.
    let want: &Expected<'_> = &[
        ("k", 95, 105, "+100", 100),
        ("k", 100, 110, "+100", 100),
        ("k", 5, 15, "+5", 5),
        ("k", 5, 15, "+5+6", 6),
        ("k", 100, 110, "+100+105", 105),
        ("k", 105, 115, "+105", 105),
        ("k", 100, 110, "+100+105+106", 106),
        ("k", 105, 115, "+105+106", 106),
    ];
    assert_eq!(kvts(&got, &batch), counts(want));

    let mut fin = TimeWindowedAggregation::new(Count, w, EmitStrategy::OnWindowClose)
        .with_retention(100)
        .unwrap()
        .with_emit_interval(0)
        .unwrap();
    let got = fin.process(&batch.counts(), 0);
    // "Window close time is 15 when timestamp is 105"
    assert_eq!(kvts_final(&got), counts(&[("k", 5, 15, "+5+6", 6)]));
    assert_eq!(rows_final(&got)[0].0, 8);
    assert_eq!(got.stats.dropped_expired, 7);
    assert_eq!(fin.totals().emitted_final, 1);
}

/// KStreamWindowAggregateTest.shouldLogAndMeterWhenSkippingExpiredWindowByGrace:
/// tumbling 10, grace 90; everything after the record at 200 is late.
#[test]
fn kafka_skipping_expired_window_by_grace() {
    let input = expired_window_input(&[200, 100, 101, 102, 103, 104, 105, 6]);
    let batch = OwnedBatch::new(&input);
    let w = TimeWindows::of_size_and_grace(10, 90).unwrap();
    for emit in [EmitStrategy::OnWindowUpdate, EmitStrategy::OnWindowClose] {
        let mut p = TimeWindowedAggregation::new(Count, w, emit)
            .with_emit_interval(0)
            .unwrap();
        let got = p.process(&batch.counts(), 0);
        assert_eq!(got.stats.dropped_expired, 7);
        let want = if emit == EmitStrategy::OnWindowUpdate {
            counts(&[("k", 200, 210, "+100", 200)])
        } else {
            Vec::new()
        };
        assert_eq!(kvts(&got, &batch), want);
    }
}

fn integration_input() -> Vec<Rec<i64>> {
    strs(&[
        ("A", 1, 0),
        ("A", 2, 5),
        ("A", 3, 10),
        ("B", 4, 6),
        ("B", 5, 11),
        ("B", 6, 15),
        ("C", 7, 25),
    ])
}

/// TimeWindowedKStreamIntegrationTest.shouldAggregateWindowedWithNoGrace
/// (size 10, advance 5, no grace, emit interval 0). Its final results miss
/// [10, 20): at stream time 25 the store (retention 10) no longer shows it
/// ("observedStreamTime : 25, retentionPeriod: 10, actualFrom: 15").
#[test]
fn kafka_integration_aggregate_with_no_grace() {
    check_count_and_sum(
        hopping(10, 5, 0),
        EmitStrategy::OnWindowUpdate,
        None,
        &integration_input(),
        &[
            ("A", 0, 10, "0+1", 0),
            ("A", 0, 10, "0+1+2", 5),
            ("A", 5, 15, "0+2", 5),
            ("A", 5, 15, "0+2+3", 10),
            ("A", 10, 20, "0+3", 10),
            ("B", 5, 15, "0+4", 6),
            ("B", 5, 15, "0+4+5", 11),
            ("B", 10, 20, "0+5", 11),
            ("B", 10, 20, "0+5+6", 15),
            ("B", 15, 25, "0+6", 15),
            ("C", 20, 30, "0+7", 25),
            ("C", 25, 35, "0+7", 25),
        ],
    );
    check_count_and_sum(
        hopping(10, 5, 0),
        EmitStrategy::OnWindowClose,
        None,
        &integration_input(),
        &[
            ("A", 0, 10, "0+1+2", 5),
            ("A", 5, 15, "0+2+3", 10),
            ("B", 5, 15, "0+4+5", 11),
            ("B", 15, 25, "0+6", 15),
        ],
    );
}

/// TimeWindowedKStreamIntegrationTest.shouldAggregateWindowedWithGrace
/// (grace 5; final results miss [5, 15), hidden at stream time 25).
#[test]
fn kafka_integration_aggregate_with_grace() {
    check_count_and_sum(
        hopping(10, 5, 5),
        EmitStrategy::OnWindowUpdate,
        None,
        &integration_input(),
        &[
            ("A", 0, 10, "0+1", 0),
            ("A", 0, 10, "0+1+2", 5),
            ("A", 5, 15, "0+2", 5),
            ("A", 5, 15, "0+2+3", 10),
            ("A", 10, 20, "0+3", 10),
            ("B", 0, 10, "0+4", 6),
            ("B", 5, 15, "0+4", 6),
            ("B", 5, 15, "0+4+5", 11),
            ("B", 10, 20, "0+5", 11),
            ("B", 10, 20, "0+5+6", 15),
            ("B", 15, 25, "0+6", 15),
            ("C", 20, 30, "0+7", 25),
            ("C", 25, 35, "0+7", 25),
        ],
    );
    check_count_and_sum(
        hopping(10, 5, 5),
        EmitStrategy::OnWindowClose,
        None,
        &integration_input(),
        &[
            ("A", 0, 10, "0+1+2", 5),
            ("B", 0, 10, "0+4", 6),
            ("A", 10, 20, "0+3", 10),
            ("B", 10, 20, "0+5+6", 15),
        ],
    );
}

fn processor_test_windows() -> TimeWindows {
    hopping(10, 5, 5)
}

fn strs(records: &[(&str, i64, i64)]) -> Vec<Rec<i64>> {
    records.iter().map(|&(k, v, t)| rec(k, v, t)).collect()
}

/// KStreamWindowAggregateTest.shouldNotEmitFinalIfNotProgressEnough (store
/// retention one day, emit interval 0).
#[test]
fn kafka_not_emit_final_if_not_progress_enough() {
    let day = 86_400_000;
    let mut p =
        TimeWindowedAggregation::new(Count, processor_test_windows(), EmitStrategy::OnWindowClose)
            .with_retention(day)
            .unwrap()
            .with_emit_interval(0)
            .unwrap();
    let got = p.process(
        &OwnedBatch::new(&strs(&[("A", 1, 0), ("B", 2, 5), ("C", 3, 15)])).counts(),
        0,
    );
    assert_eq!(
        kvts_final(&got),
        counts(&[("A", 0, 10, "0+1", 0), ("B", 0, 10, "0+2", 5)])
    );
    // Stream time does not progress.
    let got = p.process(&OwnedBatch::new(&strs(&[("D", 4, 15)])).counts(), 0);
    assert!(got.is_empty());
    // Progresses, but not enough to close another window.
    let got = p.process(&OwnedBatch::new(&strs(&[("E", 5, 19)])).counts(), 0);
    assert!(got.is_empty());
}

/// KStreamWindowAggregateTest.shouldEmitWithInterval0 and
/// shouldEmitWithLargeInterval.
#[test]
fn kafka_emit_interval() {
    let input = strs(&[
        ("A", 1, 0),
        ("A", 1, 5),
        ("B", 2, 10),
        ("C", 3, 15),
        ("D", 4, 20),
    ]);
    let want = counts(&[
        ("A", 0, 10, "0+1+1", 5),
        ("A", 5, 15, "0+1", 5),
        ("B", 5, 15, "0+2", 10),
    ]);
    // The test's store keeps windows for a day.
    let day = 86_400_000;
    let mut p =
        TimeWindowedAggregation::new(Count, processor_test_windows(), EmitStrategy::OnWindowClose)
            .with_retention(day)
            .unwrap()
            .with_emit_interval(0)
            .unwrap();
    assert_eq!(
        {
            let b = OwnedBatch::new(&input);
            kvts(&p.process(&b.counts(), 0), &b)
        },
        want
    );

    // One second: the first four records run at wall clock 0, so only the
    // first looks for final results; the next at 10 000 emits.
    let mut p =
        TimeWindowedAggregation::new(Count, processor_test_windows(), EmitStrategy::OnWindowClose)
            .with_retention(day)
            .unwrap();
    let got = p.process(&OwnedBatch::new(&input[..4]).counts(), 0);
    assert!(got.is_empty());
    let got = p.process(&OwnedBatch::new(&input[4..]).counts(), 10_000);
    assert_eq!(kvts_final(&got), want);
    let got = p.process(&OwnedBatch::new(&strs(&[("E", 5, 40)])).counts(), 10_100);
    assert!(got.is_empty());
}

/// KStreamWindowAggregateTest.shouldEmitFromLastEmitTime: a new processor
/// over the same store, with the last emit close time restored from the
/// committed metadata (Kafka does not restore observed stream time).
#[test]
fn kafka_emit_from_last_emit_time() {
    let day = 86_400_000;
    let make = || {
        TimeWindowedAggregation::new(Count, processor_test_windows(), EmitStrategy::OnWindowClose)
            .with_retention(day)
            .unwrap()
            .with_emit_interval(0)
            .unwrap()
    };
    let mut store = InMemoryWindowStore::in_memory(day, 10, false).unwrap();
    let mut p = make();
    let got = p.process(
        &OwnedBatch::new(&strs(&[("A", 1, 0), ("B", 2, 5), ("C", 3, 15)])).counts(),
        0,
    );
    assert_eq!(
        kvts_final(&got),
        counts(&[("A", 0, 10, "0+1", 0), ("B", 0, 10, "0+2", 5)])
    );
    let changes = p.drain_changes();
    assert_eq!(p.write_changes(&changes, &mut store).unwrap(), 0);
    assert_eq!(p.last_emit_close_time(), 10);

    let mut q = make();
    q.restore_times(NO_TIMESTAMP, p.last_emit_close_time(), NO_TIMESTAMP);
    q.restore_from_store(&store).unwrap();
    let got = q.process(&OwnedBatch::new(&strs(&[("D", 4, 25)])).counts(), 0);
    assert_eq!(
        kvts_final(&got),
        counts(&[("B", 5, 15, "0+2", 5), ("C", 10, 20, "0+3", 15)])
    );
}

/// The case: a 5 s tumbling count gets records at 1 s, 3 s and
/// 4.999 s, then 6 s, then a late one at 2 s.
#[test]
fn late_record_within_and_beyond_grace() {
    let input = strs(&[
        ("k", 0, 1_000),
        ("k", 0, 3_000),
        ("k", 0, 4_999),
        ("k", 0, 6_000),
        ("k", 0, 2_000),
    ]);
    let batch = OwnedBatch::new(&input);
    let run = |grace| {
        let w = TimeWindows::of_size_and_grace(5_000, grace).unwrap();
        let mut p = TimeWindowedAggregation::new(Count, w, EmitStrategy::OnWindowUpdate);
        p.process(&batch.counts(), 0)
    };
    let with_grace = run(4_000);
    assert_eq!(
        rows(&with_grace, &batch)[2],
        (2, "k".into(), 0, 5_000, Some(3), 4_999)
    );
    // The late record updates its window: count 4, timestamp still 4 999.
    assert_eq!(
        rows(&with_grace, &batch)[4],
        (4, "k".into(), 0, 5_000, Some(4), 4_999)
    );
    assert_eq!(with_grace.stats.dropped_records(), 0);
    for grace in [0, 1_000] {
        // Close time 6 000 - grace reaches the window end 5 000.
        let no_grace = run(grace);
        assert_eq!(no_grace.len(), 4);
        assert_eq!(no_grace.stats.dropped_expired, 1);
    }
    // Final results: with grace 4 s the window closes at stream time 9 s.
    let run_final = |grace, next| {
        let w = TimeWindows::of_size_and_grace(5_000, grace).unwrap();
        let mut p = TimeWindowedAggregation::new(Count, w, EmitStrategy::OnWindowClose)
            .with_emit_interval(0)
            .unwrap();
        let mut out = p.process(&batch.counts(), 0);
        let more = p.process(&OwnedBatch::new(&strs(&[("k", 0, next)])).counts(), 0);
        out.starts.extend(more.starts);
        out.values.extend(more.values);
        (out.starts, out.values, p.totals())
    };
    let (starts, values, totals) = run_final(4_000, 9_500);
    assert_eq!((starts, values), (vec![0], vec![4]));
    assert_eq!(totals.dropped_records(), 0);
    let (starts, values, totals) = run_final(0, 10_000);
    assert_eq!((starts, values), (vec![0, 5_000], vec![3, 1]));
    assert_eq!(totals.dropped_records(), 1);
    // Kafka reads final results back from a store whose retention is size
    // + grace by default: stream time jumping past the next window start
    // hides the closed window before it is emitted.
    let (starts, _, totals) = run_final(4_000, 20_000);
    assert!(starts.is_empty());
    assert_eq!(totals.expired_before_emit, 2);
}

/// The case: a 10 s window advancing by 5 s puts a record at 7 s
/// into [0, 10) and [5, 15).
#[test]
fn hopping_record_lands_in_two_windows() {
    let w = hopping(10_000, 5_000, 0);
    let mut p = TimeWindowedAggregation::new(Count, w, EmitStrategy::OnWindowUpdate);
    let batch = OwnedBatch::new(&strs(&[("k", 0, 7_000)]));
    let got = p.process(&batch.counts(), 0);
    assert_eq!(
        rows(&got, &batch),
        vec![
            (0, "k".into(), 0, 10_000, Some(1), 7_000),
            (0, "k".into(), 5_000, 15_000, Some(1), 7_000),
        ]
    );
}

/// Null keys are dropped (Kafka: "Skipping record due to null key"); a
/// null value counts in `count()` (Kafka's count aggregator sees it) and is
/// dropped by the aggregations of the value.
#[test]
fn null_keys_and_values() {
    let input = vec![
        Rec {
            key: None,
            ts: 1,
            value: Some(1i64),
        },
        Rec {
            key: Some(b"a".to_vec()),
            ts: 2,
            value: None,
        },
        rec("a", 5, 3),
    ];
    let batch = OwnedBatch::new(&input);
    let w = TimeWindows::of_size_with_no_grace(10).unwrap();
    let mut c = TimeWindowedAggregation::new(Count, w, EmitStrategy::OnWindowUpdate);
    let got = c.process(&batch.counts(), 0);
    assert_eq!(
        got.values,
        vec![1, 2],
        "count counts the null value, not the null key"
    );
    assert_eq!(
        (got.stats.dropped_null_key, got.stats.dropped_null_value),
        (1, 0)
    );
    let mut s = TimeWindowedAggregation::new(Sum::<i64>::new(), w, EmitStrategy::OnWindowUpdate);
    let got = s.process(&batch.values(), 0);
    assert_eq!(got.values, vec![5]);
    assert_eq!(got.rows, vec![2]);
    assert_eq!(got.stats.dropped_records(), 2);
}

#[test]
fn results_encode_as_kafka_serdes() {
    let w = TimeWindows::of_size_with_no_grace(10).unwrap();
    let mut p = TimeWindowedAggregation::new(Mean::<i64>::new(), w, EmitStrategy::OnWindowUpdate);
    let input = strs(&[("a", 1, 1), ("a", 2, 2)]);
    let got = p.process(&OwnedBatch::new(&input).values(), 0);
    assert_eq!(got.values, vec![1.0, 1.5]);
    assert_eq!(&got.encoded_values()[8..], &1.5f64.to_be_bytes());
}

// ---------------------------------------------------------------------------
// A brute-force model of Kafka's KStreamWindowAggregate over a map standing
// in for the window store, record by record.

/// (row, key, start, end, value, timestamp)
type ModelRow<O> = (u32, Vec<u8>, i64, i64, O, i64);

struct Model<A: Aggregate> {
    agg: A,
    windows: TimeWindows,
    emit: EmitStrategy,
    retention: i64,
    interval: i64,
    observed: i64,
    store_time: i64,
    last_emit: i64,
    next_emit: i64,
    /// (start, key) -> (state, timestamp); never expires (reads filter).
    store: BTreeMap<(i64, Vec<u8>), (A::State, i64)>,
    out: Vec<ModelRow<A::Output>>,
    dropped: u64,
}

impl<A: Aggregate> Model<A> {
    fn process(&mut self, row: u32, r: &Rec<A::Value>, now: i64) {
        let Some(key) = &r.key else {
            self.dropped += 1;
            return;
        };
        if r.value.is_none() && !A::AGGREGATES_NULL_VALUES {
            self.dropped += 1;
            return;
        }
        // Kafka's source drops records with a negative timestamp.
        if r.ts < 0 {
            self.dropped += 1;
            return;
        }
        self.observed = self.observed.max(r.ts);
        let close = self.observed - self.windows.grace();
        for start in self.windows.window_starts(r.ts) {
            let end = start + self.windows.size();
            if end > close {
                // The key-first store hides windows that started at or
                // before store time - retention; the time-ordered one one
                // millisecond later.
                let visible_from = self.store_time - self.retention
                    + i64::from(self.emit == EmitStrategy::OnWindowUpdate);
                let old = self
                    .store
                    .get(&(start, key.clone()))
                    .filter(|_| start >= visible_from)
                    .copied();
                let (state, ts) = match old {
                    None => (self.agg.add(self.agg.init(), r.value), r.ts),
                    Some((s, t)) => (self.agg.add(s, r.value), t.max(r.ts)),
                };
                self.store_time = self.store_time.max(start);
                self.store.insert((start, key.clone()), (state, ts));
                if self.emit == EmitStrategy::OnWindowUpdate {
                    self.out
                        .push((row, key.clone(), start, end, self.agg.output(state), ts));
                }
            } else {
                self.dropped += 1;
            }
        }
        if self.emit == EmitStrategy::OnWindowClose {
            self.emit_final(row, close, now);
        }
    }

    fn emit_final(&mut self, row: u32, close: i64, now: i64) {
        if now < self.next_emit {
            return;
        }
        self.next_emit = now + self.interval;
        if !(self.last_emit == NO_TIMESTAMP || self.last_emit < close) {
            return;
        }
        let size = self.windows.size();
        let upper = close - size;
        if upper < 0 {
            return;
        }
        let lower = if self.last_emit == NO_TIMESTAMP {
            0
        } else {
            (self.last_emit - size).max(0) + 1
        };
        if self.last_emit != NO_TIMESTAMP {
            let a: Vec<i64> = self.windows.window_starts(upper).collect();
            let b: Vec<i64> = self.windows.window_starts(lower - 1).collect();
            if a == b {
                return;
            }
        }
        let from = lower.max(self.store_time - self.retention);
        if from <= upper {
            for ((start, key), (state, ts)) in self
                .store
                .range((from, Vec::new())..(upper + 1, Vec::new()))
            {
                self.out.push((
                    row,
                    key.clone(),
                    *start,
                    start + size,
                    self.agg.output(*state),
                    *ts,
                ));
            }
        }
        self.last_emit = close;
    }
}

fn random_records<V>(
    rng: &mut Rng,
    n: usize,
    keys: i64,
    value: impl Fn(&mut Rng) -> V,
) -> Vec<Rec<V>> {
    let mut base = rng.range(0, 30);
    let jitter = rng.range(0, 25);
    (0..n)
        .map(|_| {
            base += rng.range(0, 3);
            if rng.chance(2) {
                base += rng.range(10, 80);
            }
            let ts = base - rng.range(0, jitter);
            let key = if rng.chance(3) {
                None
            } else {
                Some(format!("k{}", rng.range(0, keys)).into_bytes())
            };
            let v = if rng.chance(5) {
                None
            } else {
                Some(value(rng))
            };
            Rec { key, ts, value: v }
        })
        .collect()
}

/// Runs one seeded case through the kernel (in random batches) and the
/// model; returns (results, drops, final results lost to retention).
fn compare_with_model<A: Aggregate>(
    seed: u64,
    agg: A,
    value: impl Fn(&mut Rng) -> A::Value,
) -> (usize, u64, u64)
where
    A::Value: Default,
{
    compare_with_model_sized(seed, agg, value, 400, 60)
}

/// As [`compare_with_model`], with `n` records in batches of up to
/// `max_batch` (above the kernel's internal chunk of rows).
fn compare_with_model_sized<A: Aggregate>(
    seed: u64,
    agg: A,
    value: impl Fn(&mut Rng) -> A::Value,
    n_records: usize,
    max_batch: i64,
) -> (usize, u64, u64)
where
    A::Value: Default,
{
    let mut rng = Rng(seed);
    let size = rng.range(1, 20);
    let advance = if rng.chance(40) {
        size
    } else {
        rng.range(1, size)
    };
    let windows = hopping(size, advance, rng.range(0, 15));
    let emit = if rng.chance(50) {
        EmitStrategy::OnWindowUpdate
    } else {
        EmitStrategy::OnWindowClose
    };
    let retention = windows.default_retention() + if rng.chance(50) { 0 } else { rng.range(0, 40) };
    let interval = if rng.chance(50) { 0 } else { rng.range(1, 5) };
    // Many keys make most of a closing window's slots changed, so its table
    // waits whole for the drain; a drain after several batches, as a caller
    // that commits less often does, sees several such tables.
    let keys = if rng.chance(50) { 6 } else { 40 };
    let drain_every = rng.range(1, 4);
    let records = random_records(&mut rng, n_records, keys, value);

    // Tables this small stay below the default prefetch threshold: a third
    // of the seeds always prefetch, a third switch as tables come and go
    // (hints must not outlive the chunk that took them), a third never do.
    let prefetch_above = [0, 2 << 10, usize::MAX][(seed % 3) as usize];
    let mut kernel = TimeWindowedAggregation::new(agg.clone(), windows, emit)
        .with_retention(retention)
        .unwrap()
        .with_emit_interval(interval)
        .unwrap()
        .with_prefetch_above(prefetch_above);
    let mut model = Model {
        agg,
        windows,
        emit,
        retention,
        interval,
        observed: NO_TIMESTAMP,
        store_time: NO_TIMESTAMP,
        last_emit: NO_TIMESTAMP,
        next_emit: 0,
        store: BTreeMap::new(),
        out: Vec::new(),
        dropped: 0,
    };
    let mut got = Vec::new();
    let mut dropped = 0;
    let mut lost = 0;
    let mut written: BTreeMap<(i64, Vec<u8>), (A::State, i64)> = BTreeMap::new();
    let mut now = 0;
    let mut i = 0;
    let mut batches = 0;
    while i < records.len() {
        let n = (rng.range(1, max_batch) as usize).min(records.len() - i);
        now += rng.range(0, 3);
        for (j, r) in records[i..i + n].iter().enumerate() {
            model.process((i + j) as u32, r, now);
        }
        let batch = OwnedBatch::new(&records[i..i + n]);
        let res = kernel.process(&batch.values(), now);
        dropped += res.stats.dropped_records();
        lost += res.stats.expired_before_emit;
        for (row, key, start, end, value, ts) in rows(&res, &batch) {
            got.push((
                row + i as u32,
                key.into_bytes(),
                start,
                end,
                value.unwrap(),
                ts,
            ));
        }
        i += n;
        batches += 1;
        if batches % drain_every != 0 && i < records.len() {
            continue;
        }
        let changes = kernel.drain_changes();
        // In start order: a window store's retention follows the starts
        // it is given.
        assert!(
            changes.starts.is_sorted(),
            "seed {seed}: changes out of start order"
        );
        for c in 0..changes.len() {
            written.insert(
                (changes.starts[c], changes.keys.get(c).to_vec()),
                (changes.states[c].unwrap(), changes.timestamps[c]),
            );
        }
    }
    assert_eq!(
        got, model.out,
        "seed {seed}: {windows:?} {emit:?} retention {retention}"
    );
    assert_eq!(dropped, model.dropped, "seed {seed}");
    assert_eq!(written, model.store, "seed {seed}: store contents");
    (got.len(), dropped, lost)
}

#[test]
fn random_counts_and_sums_match_the_model() {
    let mut totals = (0, 0, 0);
    for seed in 0..300 {
        compare_with_model(seed, Sum::<i64>::new(), |r| r.range(-50, 50));
        let (n, dropped, lost) = compare_with_model(seed, Count, |_| ());
        totals = (totals.0 + n, totals.1 + dropped, totals.2 + lost);
    }
    // The cases exercise results, drops and final results lost to retention.
    assert!(
        totals.0 > 10_000 && totals.1 > 1_000 && totals.2 > 100,
        "{totals:?}"
    );
}

#[test]
fn random_large_batches_match_the_model() {
    for seed in 2_000..2_040 {
        compare_with_model_sized(seed, Count, |_| (), 3_000, 1_500);
        compare_with_model_sized(seed, Sum::<i64>::new(), |r| r.range(-50, 50), 3_000, 1_500);
    }
}

#[test]
fn random_min_max_mean_match_the_model() {
    for seed in 1_000..1_100 {
        compare_with_model(seed, Min::<i64>::new(), |r| r.range(-50, 50));
        compare_with_model(seed, Max::<f64>::new(), |r| r.range(-50, 50) as f64 / 4.0);
        compare_with_model(seed, Mean::<f64>::new(), |r| r.range(-50, 50) as f64);
    }
}

/// Restarting from the window store after every batch (with the times
/// committed with the offsets) gives the results of one uninterrupted run.
#[test]
fn restarts_do_not_change_results() {
    for seed in 3_000..3_150 {
        let mut rng = Rng(seed);
        let size = rng.range(1, 20);
        let advance = if rng.chance(40) {
            size
        } else {
            rng.range(1, size)
        };
        let windows = hopping(size, advance, rng.range(0, 15));
        let emit = if rng.chance(50) {
            EmitStrategy::OnWindowUpdate
        } else {
            EmitStrategy::OnWindowClose
        };
        let keys = if rng.chance(50) { 6 } else { 40 };
        let records = random_records(&mut rng, 300, keys, |r| r.range(-50, 50));
        let make = || {
            TimeWindowedAggregation::new(Sum::<i64>::new(), windows, emit)
                .with_emit_interval(0)
                .unwrap()
        };
        let whole = {
            let batch = OwnedBatch::new(&records);
            let res = make().process(&batch.values(), 0);
            rows(&res, &batch)
        };
        let mut p = make();
        // One more millisecond of retention keeps the window Kafka's
        // time-ordered store still shows at the edge (see restore_from_store).
        let mut store =
            InMemoryWindowStore::in_memory(p.retention() + 1, windows.size(), false).unwrap();
        let mut got = Vec::new();
        let mut i = 0;
        while i < records.len() {
            let n = (rng.range(1, 50) as usize).min(records.len() - i);
            let batch = OwnedBatch::new(&records[i..i + n]);
            let res = p.process(&batch.values(), 0);
            for (row, k, s, e, v, t) in rows(&res, &batch) {
                got.push((row + i as u32, k, s, e, v, t));
            }
            let changes = p.drain_changes();
            p.write_changes(&changes, &mut store).unwrap();
            let mut q = make();
            q.restore_times(
                p.observed_stream_time(),
                p.last_emit_close_time(),
                p.store_observed_time(),
            );
            q.restore_from_store(&store).unwrap();
            p = q;
            i += n;
        }
        assert_eq!(got, whole, "seed {seed}: {windows:?} {emit:?}");
    }
}
