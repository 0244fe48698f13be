//! Sliding-window aggregation, against the cases of Kafka's
//! `KStreamSlidingWindowAggregateTest` (Kafka 4.0) and a semantic model:
//! without late records, the windows are exactly the left window of every
//! record (or `[0, time difference]` for early records), and the right
//! window of every record that has a later record within reach, each
//! holding every record inside its inclusive bounds.
//!
//! Kafka's tests aggregate strings ("0+1+2") and gather results into a set
//! per window start; here the same inputs run through `count()` and `sum()`
//! and are gathered the same way.

mod window_support;

use std::collections::{BTreeMap, BTreeSet};

use strom_core::store::InMemoryWindowStore;
use strom_core::window::{
    Count, EmitStrategy, NO_TIMESTAMP, SlidingWindowedAggregation, SlidingWindows, Sum,
    WindowedResults,
};
use window_support::{OwnedBatch, Rec, Rng, kafka_count, kafka_sum, rec, rows};

/// (start -> set of (count, sum, timestamp)), as Kafka's `gatherOutput`.
type Gathered = BTreeMap<i64, BTreeSet<(i64, i64, i64)>>;

/// (key, start, end, count, sum, timestamp), in forwarding order.
type Listed = Vec<(String, i64, i64, i64, i64, i64)>;

fn sliding(td: i64, grace: i64) -> SlidingWindows {
    SlidingWindows::of_time_difference_and_grace(td, grace).unwrap()
}

/// Runs `records` (value = the number Kafka's test pipes) through a count
/// and a sum (one batch each, emit interval 0 as in Kafka's test driver),
/// and gathers (count, sum, timestamp) per window start.
fn gather(
    windows: SlidingWindows,
    emit: EmitStrategy,
    retention: Option<i64>,
    records: &[Rec<i64>],
) -> (Gathered, Listed, u64) {
    let batch = OwnedBatch::new(records);
    let make = |agg| {
        let p = SlidingWindowedAggregation::new(agg, windows, emit)
            .unwrap()
            .with_emit_interval(0)
            .unwrap();
        match retention {
            Some(r) => p.with_retention(r).unwrap(),
            None => p,
        }
    };
    let mut count = make(Count);
    let mut sum = SlidingWindowedAggregation::new(Sum::<i64>::new(), windows, emit)
        .unwrap()
        .with_emit_interval(0)
        .unwrap();
    if let Some(r) = retention {
        sum = sum.with_retention(r).unwrap();
    }
    let counted = count.process(&batch.counts(), 0);
    let summed = sum.process(&batch.values(), 0);
    assert_eq!(counted.len(), summed.len());
    let counted = rows(&counted, &batch);
    let summed = rows(&summed, &batch);
    let mut gathered = Gathered::new();
    let mut list = Vec::new();
    for (c, s) in counted.iter().zip(&summed) {
        assert_eq!((c.0, &c.1, c.2, c.3, c.5), (s.0, &s.1, s.2, s.3, s.5));
        let (count, sum) = (c.4.unwrap(), s.4.unwrap());
        gathered.entry(c.2).or_default().insert((count, sum, c.5));
        list.push((c.1.clone(), c.2, c.3, count, sum, c.5));
    }
    (gathered, list, count.totals().dropped_records())
}

/// Kafka's expected map: start -> [(aggregate string, timestamp)].
fn expected(entries: &[(i64, &[(&str, i64)])]) -> Gathered {
    entries
        .iter()
        .map(|&(start, set)| {
            let set = set
                .iter()
                .map(|&(agg, ts)| (kafka_count(agg), kafka_sum(agg), ts))
                .collect();
            (start, set)
        })
        .collect()
}

fn recs(key: &str, values_ts: &[(i64, i64)]) -> Vec<Rec<i64>> {
    values_ts.iter().map(|&(v, ts)| rec(key, v, ts)).collect()
}

/// KStreamSlidingWindowAggregateTest.testAggregateSmallInput (time
/// difference 10, grace 5; update mode with a 50 s in-memory store).
#[test]
fn kafka_aggregate_small_input() {
    let input = recs(
        "A",
        &[
            (1, 10),
            (2, 10),
            (3, 14),
            (4, 15),
            (5, 20),
            (6, 22),
            (7, 30),
        ],
    );
    let (got, _, _) = gather(
        sliding(10, 5),
        EmitStrategy::OnWindowUpdate,
        Some(50_000),
        &input,
    );
    assert_eq!(
        got,
        expected(&[
            (0, &[("0+1", 10), ("0+1+2", 10)]),
            (4, &[("0+1+2+3", 14)]),
            (5, &[("0+1+2+3+4", 15)]),
            (10, &[("0+1+2+3+4+5", 20)]),
            (11, &[("0+3", 14), ("0+3+4", 15), ("0+3+4+5", 20)]),
            (12, &[("0+3+4+5+6", 22)]),
            (15, &[("0+4", 15), ("0+4+5", 20), ("0+4+5+6", 22)]),
            (16, &[("0+5", 20), ("0+5+6", 22)]),
            (20, &[("0+5+6+7", 30)]),
            (21, &[("0+6", 22), ("0+6+7", 30)]),
            (23, &[("0+7", 30)]),
        ])
    );
    let (got, _, _) = gather(sliding(10, 5), EmitStrategy::OnWindowClose, None, &input);
    assert_eq!(
        got,
        expected(&[
            (0, &[("0+1+2", 10)]),
            (4, &[("0+1+2+3", 14)]),
            (5, &[("0+1+2+3+4", 15)]),
            (10, &[("0+1+2+3+4+5", 20)]),
            (11, &[("0+3+4+5", 20)]),
            (12, &[("0+3+4+5+6", 22)]),
        ])
    );
}

/// KStreamSlidingWindowAggregateTest.testReduceSmallInput (a reduce:
/// "1+2" has no initializer; count and sum read it the same way with a
/// leading "0+").
#[test]
fn kafka_reduce_small_input() {
    let input = recs("A", &[(1, 10), (2, 14), (3, 15), (4, 22), (5, 26), (6, 30)]);
    let r = |entries: &[(i64, &[(&str, i64)])]| {
        let owned: Vec<(i64, Vec<(String, i64)>)> = entries
            .iter()
            .map(|&(s, set)| (s, set.iter().map(|&(a, t)| (format!("0+{a}"), t)).collect()))
            .collect();
        let borrowed: Vec<Vec<(&str, i64)>> = owned
            .iter()
            .map(|(_, set)| set.iter().map(|(a, t)| (a.as_str(), *t)).collect())
            .collect();
        let refs: Vec<(i64, &[(&str, i64)])> = owned
            .iter()
            .zip(&borrowed)
            .map(|((s, _), set)| (*s, set.as_slice()))
            .collect();
        expected(&refs)
    };
    let (got, _, _) = gather(
        sliding(10, 5),
        EmitStrategy::OnWindowUpdate,
        Some(50_000),
        &input,
    );
    assert_eq!(
        got,
        r(&[
            (0, &[("1", 10)]),
            (4, &[("1+2", 14)]),
            (5, &[("1+2+3", 15)]),
            (11, &[("2", 14), ("2+3", 15)]),
            (12, &[("2+3+4", 22)]),
            (15, &[("3", 15), ("3+4", 22)]),
            (16, &[("4", 22), ("4+5", 26)]),
            (20, &[("4+5+6", 30)]),
            (23, &[("5", 26), ("5+6", 30)]),
            (27, &[("6", 30)]),
        ])
    );
    let (got, _, _) = gather(sliding(10, 5), EmitStrategy::OnWindowClose, None, &input);
    assert_eq!(
        got,
        r(&[
            (0, &[("1", 10)]),
            (4, &[("1+2", 14)]),
            (5, &[("1+2+3", 15)]),
            (11, &[("2+3", 15)]),
            (12, &[("2+3+4", 22)]),
        ])
    );
}

/// KStreamSlidingWindowAggregateTest.testAggregateLargeInput: four keys,
/// out of order; results sorted by key, then start (the sort is stable, so
/// the updates of one window stay in forwarding order).
#[test]
fn kafka_aggregate_large_input() {
    let input: Vec<Rec<i64>> = [
        ("A", 1, 10),
        ("A", 2, 20),
        ("A", 3, 22),
        ("A", 4, 15),
        ("B", 1, 12),
        ("B", 2, 13),
        ("B", 3, 18),
        ("B", 4, 19),
        ("B", 5, 25),
        ("B", 6, 14),
        ("C", 1, 11),
        ("C", 2, 15),
        ("C", 3, 16),
        ("C", 4, 21),
        ("C", 5, 23),
        ("D", 4, 11),
        ("D", 2, 12),
        ("D", 3, 29),
        ("D", 5, 16),
    ]
    .iter()
    .map(|&(k, v, t)| rec(k, v, t))
    .collect();
    let sorted = |mut list: Listed| {
        list.sort_by(|a, b| (&a.0, a.1).cmp(&(&b.0, b.1)));
        list
    };
    let want = |entries: &[(&str, i64, i64, &str, i64)]| {
        entries
            .iter()
            .map(|&(k, s, e, agg, t)| (k.to_string(), s, e, kafka_count(agg), kafka_sum(agg), t))
            .collect::<Vec<_>>()
    };
    let (_, list, _) = gather(
        sliding(10, 50),
        EmitStrategy::OnWindowUpdate,
        Some(50_000),
        &input,
    );
    assert_eq!(
        sorted(list),
        want(&[
            ("A", 0, 10, "0+1", 10),
            ("A", 5, 15, "0+1+4", 15),
            ("A", 10, 20, "0+1+2", 20),
            ("A", 10, 20, "0+1+2+4", 20),
            ("A", 11, 21, "0+2", 20),
            ("A", 11, 21, "0+2+4", 20),
            ("A", 12, 22, "0+2+3", 22),
            ("A", 12, 22, "0+2+3+4", 22),
            ("A", 16, 26, "0+2+3", 22),
            ("A", 21, 31, "0+3", 22),
            ("B", 2, 12, "0+1", 12),
            ("B", 3, 13, "0+1+2", 13),
            ("B", 4, 14, "0+1+2+6", 14),
            ("B", 8, 18, "0+1+2+3", 18),
            ("B", 8, 18, "0+1+2+3+6", 18),
            ("B", 9, 19, "0+1+2+3+4", 19),
            ("B", 9, 19, "0+1+2+3+4+6", 19),
            ("B", 13, 23, "0+2", 13),
            ("B", 13, 23, "0+2+3", 18),
            ("B", 13, 23, "0+2+3+4", 19),
            ("B", 13, 23, "0+2+3+4+6", 19),
            ("B", 14, 24, "0+3", 18),
            ("B", 14, 24, "0+3+4", 19),
            ("B", 14, 24, "0+3+4+6", 19),
            ("B", 15, 25, "0+3+4+5", 25),
            ("B", 19, 29, "0+4", 19),
            ("B", 19, 29, "0+4+5", 25),
            ("B", 20, 30, "0+5", 25),
            ("C", 1, 11, "0+1", 11),
            ("C", 5, 15, "0+1+2", 15),
            ("C", 6, 16, "0+1+2+3", 16),
            ("C", 11, 21, "0+1+2+3+4", 21),
            ("C", 12, 22, "0+2", 15),
            ("C", 12, 22, "0+2+3", 16),
            ("C", 12, 22, "0+2+3+4", 21),
            ("C", 13, 23, "0+2+3+4+5", 23),
            ("C", 16, 26, "0+3", 16),
            ("C", 16, 26, "0+3+4", 21),
            ("C", 16, 26, "0+3+4+5", 23),
            ("C", 17, 27, "0+4", 21),
            ("C", 17, 27, "0+4+5", 23),
            ("C", 22, 32, "0+5", 23),
            ("D", 1, 11, "0+4", 11),
            ("D", 2, 12, "0+4+2", 12),
            ("D", 6, 16, "0+4+2+5", 16),
            ("D", 12, 22, "0+2", 12),
            ("D", 12, 22, "0+2+5", 16),
            ("D", 13, 23, "0+5", 16),
            ("D", 19, 29, "0+3", 29),
        ])
    );
    let (_, list, _) = gather(sliding(10, 10), EmitStrategy::OnWindowClose, None, &input);
    assert_eq!(
        sorted(list),
        want(&[
            ("A", 0, 10, "0+1", 10),
            ("A", 5, 15, "0+1+4", 15),
            ("B", 2, 12, "0+1", 12),
            ("B", 3, 13, "0+1+2", 13),
            ("B", 8, 18, "0+1+2+3+6", 18),
            ("C", 5, 15, "0+2", 15),
            ("C", 6, 16, "0+2+3", 16),
        ])
    );
}

fn early_small_expected_update() -> Gathered {
    expected(&[
        (
            0,
            &[
                ("0+1", 0),
                ("0+1+2", 5),
                ("0+1+2+3", 6),
                ("0+1+2+3+4", 6),
                ("0+1+2+3+4+5", 13),
                ("0+1+2+3+4+5+6", 13),
            ],
        ),
        (
            1,
            &[
                ("0+2", 5),
                ("0+2+3", 6),
                ("0+2+3+4", 6),
                ("0+2+3+4+5", 13),
                ("0+2+3+4+5+6", 13),
            ],
        ),
        (4, &[("0+2+3", 6), ("0+2+3+5", 13), ("0+2+3+5+6", 13)]),
        (6, &[("0+3", 6), ("0+3+5", 13), ("0+3+5+6", 13)]),
        (7, &[("0+5", 13), ("0+5+6", 13)]),
        (11, &[("0+5", 13)]),
        (20, &[("0+7", 70)]),
    ])
}

fn early_small_expected_final() -> Gathered {
    expected(&[
        (0, &[("0+1+2+3+4+5+6", 13)]),
        (1, &[("0+2+3+4+5+6", 13)]),
        (4, &[("0+2+3+5+6", 13)]),
        (6, &[("0+3+5+6", 13)]),
        (7, &[("0+5+6", 13)]),
        (11, &[("0+5", 13)]),
    ])
}

/// KStreamSlidingWindowAggregateTest.testEarlyRecordsSmallInput and
/// testEarlyNoGracePeriodSmallInput (time difference 50, no grace, default
/// retention).
#[test]
fn kafka_early_records_small_input() {
    let input = recs(
        "A",
        &[(1, 0), (2, 5), (3, 6), (4, 3), (5, 13), (6, 10), (7, 70)],
    );
    for windows in [
        sliding(50, 0),
        SlidingWindows::of_time_difference_with_no_grace(50).unwrap(),
    ] {
        let (got, _, _) = gather(windows, EmitStrategy::OnWindowUpdate, None, &input);
        assert_eq!(got, early_small_expected_update());
        let (got, _, _) = gather(windows, EmitStrategy::OnWindowClose, None, &input);
        assert_eq!(got, early_small_expected_final());
    }
}

/// KStreamSlidingWindowAggregateTest.testEarlyRecordsRepeatedInput (time
/// difference 5, no grace).
#[test]
fn kafka_early_records_repeated_input() {
    let input = recs(
        "A",
        &[
            (1, 0),
            (2, 2),
            (3, 4),
            (4, 0),
            (5, 2),
            (6, 2),
            (7, 0),
            (8, 7),
        ],
    );
    let (got, _, _) = gather(sliding(5, 0), EmitStrategy::OnWindowUpdate, None, &input);
    assert_eq!(
        got,
        expected(&[
            (
                0,
                &[
                    ("0+1", 0),
                    ("0+1+2", 2),
                    ("0+1+2+3+4+5", 4),
                    ("0+1+2+3+4+5+6", 4),
                    ("0+1+2+3", 4),
                    ("0+1+2+3+4", 4),
                    ("0+1+2+3+4+5+6+7", 4),
                ],
            ),
            (
                1,
                &[("0+2+3+5+6", 4), ("0+2", 2), ("0+2+3", 4), ("0+2+3+5", 4)],
            ),
            (2, &[("0+2+3+5+6+8", 7)]),
            (3, &[("0+3", 4), ("0+3+8", 7)]),
            (5, &[("0+8", 7)]),
        ])
    );
    let (got, _, _) = gather(sliding(5, 0), EmitStrategy::OnWindowClose, None, &input);
    assert_eq!(
        got,
        expected(&[(0, &[("0+1+2+3+4+5+6+7", 4)]), (1, &[("0+2+3+5+6", 4)])])
    );
}

/// KStreamSlidingWindowAggregateTest.testEarlyRecordsLargeInput (time
/// difference 10; grace 50 for updates, 1 for final results).
#[test]
fn kafka_early_records_large_input() {
    let input = recs(
        "E",
        &[
            (1, 0),
            (3, 5),
            (4, 6),
            (2, 3),
            (6, 13),
            (5, 10),
            (7, 4),
            (8, 2),
            (9, 15),
        ],
    );
    let sorted = |mut list: Listed| {
        list.sort_by_key(|a| a.1);
        list.into_iter()
            .map(|(_, s, _, c, sum, t)| (s, c, sum, t))
            .collect::<Vec<_>>()
    };
    let want = |entries: &[(i64, &str, i64)]| {
        entries
            .iter()
            .map(|&(s, agg, t)| (s, kafka_count(agg), kafka_sum(agg), t))
            .collect::<Vec<_>>()
    };
    let (_, list, _) = gather(
        sliding(10, 50),
        EmitStrategy::OnWindowUpdate,
        Some(50_000),
        &input,
    );
    assert_eq!(
        sorted(list),
        want(&[
            (0, "0+1", 0),
            (0, "0+1+3", 5),
            (0, "0+1+3+4", 6),
            (0, "0+1+3+4+2", 6),
            (0, "0+1+3+4+2+5", 10),
            (0, "0+1+3+4+2+5+7", 10),
            (0, "0+1+3+4+2+5+7+8", 10),
            (1, "0+3", 5),
            (1, "0+3+4", 6),
            (1, "0+3+4+2", 6),
            (1, "0+3+4+2+5", 10),
            (1, "0+3+4+2+5+7", 10),
            (1, "0+3+4+2+5+7+8", 10),
            (3, "0+3+4+2+6", 13),
            (3, "0+3+4+2+6+5", 13),
            (3, "0+3+4+2+6+5+7", 13),
            (4, "0+3+4", 6),
            (4, "0+3+4+6", 13),
            (4, "0+3+4+6+5", 13),
            (4, "0+3+4+6+5+7", 13),
            (5, "0+3+4+6+5", 13),
            (5, "0+3+4+6+5+9", 15),
            (6, "0+4", 6),
            (6, "0+4+6", 13),
            (6, "0+4+6+5", 13),
            (6, "0+4+6+5+9", 15),
            (7, "0+6", 13),
            (7, "0+6+5", 13),
            (7, "0+6+5+9", 15),
            (11, "0+6", 13),
            (11, "0+6+9", 15),
            (14, "0+9", 15),
        ])
    );
    let (_, list, _) = gather(sliding(10, 1), EmitStrategy::OnWindowClose, None, &input);
    assert_eq!(
        sorted(list),
        want(&[
            (0, "0+1+3+4+2", 6),
            (1, "0+3+4+2", 6),
            (3, "0+3+4+2+6+5+7", 13)
        ])
    );
}

/// KStreamSlidingWindowAggregateTest.testNoGracePeriodSmallInput.
#[test]
fn kafka_no_grace_period_small_input() {
    let input = recs(
        "A",
        &[(1, 100), (2, 105), (3, 106), (4, 103), (5, 113), (6, 110)],
    );
    let windows = SlidingWindows::of_time_difference_with_no_grace(50).unwrap();
    let (got, _, _) = gather(windows, EmitStrategy::OnWindowUpdate, None, &input);
    assert_eq!(
        got,
        expected(&[
            (50, &[("0+1", 100)]),
            (55, &[("0+1+2", 105)]),
            (56, &[("0+1+2+3", 106), ("0+1+2+3+4", 106)]),
            (63, &[("0+1+2+3+4+5", 113), ("0+1+2+3+4+5+6", 113)]),
            (
                101,
                &[
                    ("0+2", 105),
                    ("0+2+3", 106),
                    ("0+2+3+4", 106),
                    ("0+2+3+4+5", 113),
                    ("0+2+3+4+5+6", 113),
                ],
            ),
            (104, &[("0+2+3", 106), ("0+2+3+5", 113), ("0+2+3+5+6", 113)]),
            (106, &[("0+3", 106), ("0+3+5", 113), ("0+3+5+6", 113)]),
            (107, &[("0+5", 113), ("0+5+6", 113)]),
            (111, &[("0+5", 113)]),
        ])
    );
    let (got, _, _) = gather(windows, EmitStrategy::OnWindowClose, None, &input);
    assert_eq!(
        got,
        expected(&[
            (50, &[("0+1", 100)]),
            (55, &[("0+1+2", 105)]),
            (56, &[("0+1+2+3+4", 106)]),
        ])
    );
}

/// KStreamSlidingWindowAggregateTest.shouldLogAndMeterWhenSkippingExpiredWindowByGrace
/// (time difference 10, grace 90): seven records dropped, one each.
#[test]
fn kafka_skipping_expired_window_by_grace() {
    let input = recs(
        "k",
        &[
            (100, 200),
            (0, 100),
            (1, 101),
            (2, 102),
            (3, 103),
            (4, 104),
            (5, 105),
            (6, 15),
            (101, 300),
            (102, 400),
        ],
    );
    let (_, list, dropped) = gather(
        sliding(10, 90),
        EmitStrategy::OnWindowUpdate,
        Some(50_000),
        &input,
    );
    assert_eq!(dropped, 7);
    let want = |entries: &[(i64, i64, i64)]| {
        entries
            .iter()
            .map(|&(s, v, t)| ("k".to_string(), s, s + 10, 1, v, t))
            .collect::<Vec<_>>()
    };
    assert_eq!(
        list,
        want(&[(190, 100, 200), (290, 101, 300), (390, 102, 400)])
    );
    let (_, list, dropped) = gather(sliding(10, 90), EmitStrategy::OnWindowClose, None, &input);
    assert_eq!(dropped, 7);
    assert_eq!(list, want(&[(190, 100, 200), (290, 101, 300)]));
}

/// Null keys and null values are both dropped by Kafka's sliding windows,
/// even for a count (shouldLogAndMeterWhenSkippingNullKey: "null key or
/// value").
#[test]
fn null_keys_and_values_are_dropped() {
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
    ];
    let (got, _, dropped) = gather(sliding(10, 100), EmitStrategy::OnWindowUpdate, None, &input);
    assert!(got.is_empty());
    assert_eq!(dropped, 2);
    assert!(
        SlidingWindowedAggregation::new(Count, sliding(0, 0), EmitStrategy::OnWindowUpdate)
            .is_err()
    );
}

/// KStreamSlidingWindowAggregateTest.testAggregateRandomInput: the last
/// result of every window, whatever the order of the input (grace 100).
/// The letters are values 1..=22 ("A" = 1).
#[test]
fn kafka_aggregate_random_input() {
    let letters: Vec<(char, i64)> = [
        ('A', 10),
        ('B', 15),
        ('C', 16),
        ('D', 18),
        ('E', 30),
        ('F', 40),
        ('G', 55),
        ('H', 56),
        ('I', 58),
        ('J', 58),
        ('K', 62),
        ('L', 63),
        ('M', 63),
        ('N', 63),
        ('O', 76),
        ('P', 77),
        ('Q', 80),
        ('R', 2),
        ('S', 3),
        ('T', 5),
        ('U', 8),
    ]
    .to_vec();
    let value = |c: char| i64::from(c as u8 - b'A' + 1);
    let last = |entries: &[(i64, &str, i64)]| -> BTreeMap<i64, (i64, i64, i64)> {
        entries
            .iter()
            .map(|&(s, agg, t)| {
                let sum = agg.chars().map(value).sum();
                (s, (agg.len() as i64, sum, t))
            })
            .collect()
    };
    let want_update = last(&[
        (0, "ARSTU", 10),
        (3, "ASTU", 10),
        (4, "ATU", 10),
        (5, "ABTU", 15),
        (6, "ABCU", 16),
        (8, "ABCDU", 18),
        (9, "ABCD", 18),
        (11, "BCD", 18),
        (16, "CD", 18),
        (17, "D", 18),
        (20, "E", 30),
        (30, "EF", 40),
        (31, "F", 40),
        (45, "G", 55),
        (46, "GH", 56),
        (48, "GHIJ", 58),
        (52, "GHIJK", 62),
        (53, "GHIJKLMN", 63),
        (56, "HIJKLMN", 63),
        (57, "IJKLMN", 63),
        (59, "KLMN", 63),
        (63, "LMN", 63),
        (66, "O", 76),
        (67, "OP", 77),
        (70, "OPQ", 80),
        (77, "PQ", 80),
        (78, "Q", 80),
        (171, "V", 181),
    ]);
    // Only the windows the default retention still shows at 181.
    let want_final = last(&[
        (52, "GHIJK", 62),
        (53, "GHIJKLMN", 63),
        (56, "HIJKLMN", 63),
        (57, "IJKLMN", 63),
        (59, "KLMN", 63),
        (63, "LMN", 63),
        (66, "O", 76),
        (67, "OP", 77),
        (70, "OPQ", 80),
    ]);
    let mut rng = Rng(7);
    for _ in 0..50 {
        let mut shuffled = letters.clone();
        for i in (1..shuffled.len()).rev() {
            shuffled.swap(i, rng.range(0, i as i64) as usize);
        }
        shuffled.push(('V', 181));
        let input: Vec<Rec<i64>> = shuffled
            .iter()
            .map(|&(c, t)| rec("A", value(c), t))
            .collect();
        for (emit, retention, want) in [
            (EmitStrategy::OnWindowUpdate, Some(50_000), &want_update),
            (EmitStrategy::OnWindowClose, None, &want_final),
        ] {
            let (_, list, _) = gather(sliding(10, 100), emit, retention, &input);
            let got: BTreeMap<i64, (i64, i64, i64)> = list
                .into_iter()
                .map(|(_, s, _, c, sum, t)| (s, (c, sum, t)))
                .collect();
            assert_eq!(&got, want, "{emit:?} {shuffled:?}");
        }
    }
}

// ---------------------------------------------------------------------------
// Semantic model: without late records the windows and their contents
// follow from the records alone.

/// The windows a key's records make, with (count, sum, max timestamp).
fn semantic_windows(td: i64, records: &[(i64, i64)]) -> BTreeMap<i64, (i64, i64, i64)> {
    let mut starts = BTreeSet::new();
    for &(t, _) in records {
        starts.insert((t - td).max(0));
        if records.iter().any(|&(u, _)| u > t && u <= t + 1 + td) {
            starts.insert(t + 1);
        }
    }
    starts
        .into_iter()
        .map(|s| {
            let inside: Vec<&(i64, i64)> = records
                .iter()
                .filter(|&&(t, _)| t >= s && t <= s + td)
                .collect();
            let sum = inside.iter().map(|r| r.1).sum();
            let max = inside.iter().map(|r| r.0).max().unwrap();
            (s, (inside.len() as i64, sum, max))
        })
        .collect()
}

fn random_input(rng: &mut Rng, n: usize, td: i64) -> Vec<Rec<i64>> {
    let span = rng.range(1, 4) * td;
    (0..n)
        .map(|_| {
            let key = format!("k{}", rng.range(0, 3));
            rec(&key, rng.range(-9, 9), rng.range(0, span))
        })
        .collect()
}

/// Processes `input` in random batches; returns the last result per (key,
/// start) and all results in order.
fn run_batched(
    p: &mut SlidingWindowedAggregation<Sum<i64>>,
    input: &[Rec<i64>],
    rng: &mut Rng,
    restart: bool,
    emit: EmitStrategy,
    retention: i64,
) -> Vec<(u32, String, i64, i64, i64, i64)> {
    let mut all = Vec::new();
    let mut store = InMemoryWindowStore::in_memory(retention + 1, 1, false).unwrap();
    let mut i = 0;
    while i < input.len() {
        let n = (rng.range(1, 40) as usize).min(input.len() - i);
        let batch = OwnedBatch::new(&input[i..i + n]);
        let res: WindowedResults<i64> = p.process(&batch.values(), 0);
        for (row, key, start, end, value, ts) in rows(&res, &batch) {
            all.push((row + i as u32, key, start, end, value.unwrap(), ts));
        }
        let changes = p.drain_changes();
        p.write_changes(&changes, &mut store).unwrap();
        if restart {
            // A new processor over the same store, with the committed times.
            let mut q = SlidingWindowedAggregation::new(Sum::<i64>::new(), *p.windows(), emit)
                .unwrap()
                .with_retention(retention)
                .unwrap()
                .with_emit_interval(0)
                .unwrap();
            q.restore_times(
                p.observed_stream_time(),
                p.last_emit_close_time(),
                p.store_observed_time(),
            );
            q.restore_from_store(&store).unwrap();
            *p = q;
        }
        i += n;
    }
    all
}

#[test]
fn random_inputs_make_the_semantic_windows() {
    let mut rng = Rng(42);
    for case in 0..200 {
        let td = rng.range(1, 12);
        let n = rng.range(1, 60) as usize;
        let input = random_input(&mut rng, n, td);
        // Grace covers every record, retention every window.
        let windows = sliding(td, 1_000);
        let mut p = SlidingWindowedAggregation::new(
            Sum::<i64>::new(),
            windows,
            EmitStrategy::OnWindowUpdate,
        )
        .unwrap()
        .with_retention(100_000)
        .unwrap();
        let results = run_batched(
            &mut p,
            &input,
            &mut rng,
            false,
            EmitStrategy::OnWindowUpdate,
            100_000,
        );
        let mut last: BTreeMap<(String, i64), (i64, i64)> = BTreeMap::new();
        for (_, key, start, end, value, ts) in &results {
            assert_eq!(*end, start + td);
            last.insert((key.clone(), *start), (*value, *ts));
        }
        let mut want = BTreeMap::new();
        for k in 0..=3 {
            let key = format!("k{k}");
            let recs: Vec<(i64, i64)> = input
                .iter()
                .filter(|r| r.key.as_deref() == Some(key.as_bytes()))
                .map(|r| (r.ts, r.value.unwrap()))
                .collect();
            for (s, (_, sum, max)) in semantic_windows(td, &recs) {
                want.insert((key.clone(), s), (sum, max));
            }
        }
        assert_eq!(last, want, "case {case}: td {td}, input {input:?}");
    }
}

/// Final results: each closed window once, with its semantic contents,
/// when stream time passes its end (records in order, retention ample).
#[test]
fn random_final_results_are_the_semantic_windows() {
    let mut rng = Rng(4242);
    for case in 0..200 {
        let td = rng.range(1, 12);
        let n = rng.range(1, 60) as usize;
        let mut input = random_input(&mut rng, n, td);
        input.sort_by_key(|r| r.ts);
        let flush = input.last().map_or(0, |r| r.ts) + 10 * td + 10;
        input.push(rec("flush", 0, flush));
        let windows = sliding(td, 0);
        let mut p = SlidingWindowedAggregation::new(
            Sum::<i64>::new(),
            windows,
            EmitStrategy::OnWindowClose,
        )
        .unwrap()
        .with_retention(100_000)
        .unwrap()
        .with_emit_interval(0)
        .unwrap();
        let results = run_batched(
            &mut p,
            &input,
            &mut rng,
            false,
            EmitStrategy::OnWindowClose,
            100_000,
        );
        let mut got = BTreeMap::new();
        for (_, key, start, _, value, ts) in results {
            assert!(
                got.insert((key, start), (value, ts)).is_none(),
                "case {case}: emitted twice"
            );
        }
        let mut want = BTreeMap::new();
        for k in 0..=3 {
            let key = format!("k{k}");
            let recs: Vec<(i64, i64)> = input
                .iter()
                .filter(|r| r.key.as_deref() == Some(key.as_bytes()))
                .map(|r| (r.ts, r.value.unwrap()))
                .collect();
            for (s, (_, sum, max)) in semantic_windows(td, &recs) {
                want.insert((key.clone(), s), (sum, max));
            }
        }
        assert_eq!(got, want, "case {case}: td {td}");
    }
}

/// Late records, drops and the default retention: processing in random
/// batches, or restarting from the store after every batch, gives the
/// results of one uninterrupted batch.
#[test]
fn batches_and_restarts_do_not_change_results() {
    let mut rng = Rng(99);
    let mut totals = (0, 0, 0);
    for case in 0..200 {
        let td = rng.range(1, 10);
        let grace = rng.range(0, 10);
        let windows = sliding(td, grace);
        let emit = if rng.chance(50) {
            EmitStrategy::OnWindowUpdate
        } else {
            EmitStrategy::OnWindowClose
        };
        let retention = windows.default_retention();
        let mut input = random_input(&mut rng, 80, td);
        // Some stream-time jumps.
        for r in &mut input {
            if rng.chance(5) {
                r.ts += rng.range(20, 60);
            }
        }
        let mut keyed: Vec<(i64, Rec<i64>)> = input
            .into_iter()
            .map(|r| (r.ts + rng.range(0, 2 * td + grace), r))
            .collect();
        keyed.sort_by_key(|(k, _)| *k);
        let input: Vec<Rec<i64>> = keyed.into_iter().map(|(_, r)| r).collect();
        let make = || {
            SlidingWindowedAggregation::new(Sum::<i64>::new(), windows, emit)
                .unwrap()
                .with_emit_interval(0)
                .unwrap()
        };
        let whole = {
            let mut p = make();
            let batch = OwnedBatch::new(&input);
            let res = p.process(&batch.values(), 0);
            totals.0 += res.stats.dropped_expired;
            totals.1 += res.stats.emitted_final;
            totals.2 += res.stats.expired_before_emit;
            rows(&res, &batch)
                .into_iter()
                .map(|(row, k, s, e, v, t)| (row, k, s, e, v.unwrap(), t))
                .collect::<Vec<_>>()
        };
        let mut p = make();
        let batched = run_batched(&mut p, &input, &mut rng, false, emit, retention);
        assert_eq!(batched, whole, "case {case}: batches");
        let mut p = make();
        let restarted = run_batched(&mut p, &input, &mut rng, true, emit, retention);
        assert_eq!(restarted, whole, "case {case}: restarts");
        assert_eq!(p.observed_stream_time() == NO_TIMESTAMP, input.is_empty());
    }
    // The cases exercise drops, final results and windows the retention
    // hid before their final result.
    assert!(
        totals.0 > 500 && totals.1 > 500 && totals.2 > 10,
        "{totals:?}"
    );
}

/// Old values (Kafka's `sendOldValues`): an update's old value is the
/// aggregate it started from: the window's previous result, or for a new
/// window the initializer's (0) or the aggregate a new left window copies
/// from the window before it (Kafka's `updateWindowAndForward` forwards
/// what it was given); a record's right window, copied from the later
/// records' aggregate, has none.
#[test]
fn old_values_are_the_aggregate_each_update_started_from() {
    let mut rng = Rng(7);
    for _ in 0..100 {
        let td = rng.range(1, 12);
        let n = rng.range(1, 60) as usize;
        let input = random_input(&mut rng, n, td);
        let batch = OwnedBatch::new(&input);
        let mut p = SlidingWindowedAggregation::new(
            Sum::<i64>::new(),
            sliding(td, 1_000),
            EmitStrategy::OnWindowUpdate,
        )
        .unwrap()
        .with_retention(100_000)
        .unwrap()
        .with_old_values(true);
        let out = p.process(&batch.values(), 0);
        assert_eq!(out.old_values.len(), out.len());
        let mut last: BTreeMap<(String, i64), (u32, i64)> = BTreeMap::new();
        for (i, (row, key, start, _end, value, _ts)) in rows(&out, &batch).into_iter().enumerate() {
            let record_ts = input[row as usize].ts;
            match out.old_values[i] {
                None => assert_eq!(start, record_ts + 1, "only right windows lack an old value"),
                Some(old) => {
                    assert_eq!(old + input[row as usize].value.unwrap(), value.unwrap());
                    // (Kafka puts a window twice when a record's left window is
                    // also the previous record's right window: both start from
                    // their own base.)
                    if let Some(&(previous_row, previous)) = last.get(&(key.clone(), start))
                        && previous_row != row
                    {
                        assert_eq!(old, previous);
                    }
                }
            }
            last.insert((key, start), (row, value.unwrap()));
        }
    }
    // Without the flag, none are sent.
    let input = [rec("a", 1, 5), rec("a", 2, 6)];
    let batch = OwnedBatch::new(&input);
    let mut p = SlidingWindowedAggregation::new(
        Sum::<i64>::new(),
        sliding(5, 10),
        EmitStrategy::OnWindowUpdate,
    )
    .unwrap();
    assert!(p.process(&batch.values(), 0).old_values.is_empty());
}
