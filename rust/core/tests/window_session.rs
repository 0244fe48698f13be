//! Session-window aggregation, against the cases of Kafka's
//! `KStreamSessionWindowAggregateProcessorTest` (Kafka 4.0; its store keeps
//! sessions for 3 * gap) and a semantic model: without late records, the
//! sessions left after applying the results as table updates are the runs of
//! each key's records no more than the gap apart.

mod window_support;

use std::collections::BTreeMap;

use strom_core::store::InMemorySessionStore;
use strom_core::window::{
    Count, EmitStrategy, Mean, SessionWindowedAggregation, SessionWindows, Sum, WindowedResults,
};
use window_support::{OwnedBatch, Rec, Rng, rec, rows, rows_final};

const GAP: i64 = 5 * 60 * 1000;

/// (key, start, end, count or None for a tombstone, timestamp)
type Out = Vec<(String, i64, i64, Option<i64>, i64)>;

fn processor(emit: EmitStrategy) -> SessionWindowedAggregation<Count> {
    let windows = SessionWindows::of_inactivity_gap_with_no_grace(GAP).unwrap();
    SessionWindowedAggregation::new(Count, windows, emit)
        .with_retention(3 * GAP)
        .unwrap()
        .with_emit_interval(0)
        .unwrap()
}

fn strs(records: &[(&str, i64)]) -> Vec<Rec<i64>> {
    records.iter().map(|&(k, t)| rec(k, 1, t)).collect()
}

fn run(p: &mut SessionWindowedAggregation<Count>, records: &[(&str, i64)]) -> Out {
    let batch = OwnedBatch::new(&strs(records));
    let res = p.process(&batch.counts(), 0);
    rows(&res, &batch)
        .into_iter()
        .map(|(_, k, s, e, v, t)| (k, s, e, v, t))
        .collect()
}

fn out(entries: &[(&str, i64, i64, Option<i64>, i64)]) -> Out {
    entries
        .iter()
        .map(|&(k, s, e, v, t)| (k.to_string(), s, e, v, t))
        .collect()
}

/// The sessions left after applying `results` as table updates.
fn table(results: &Out) -> BTreeMap<(String, i64, i64), i64> {
    let mut t = BTreeMap::new();
    for (k, s, e, v, _) in results {
        match v {
            Some(v) => t.insert((k.clone(), *s, *e), *v),
            None => t.remove(&(k.clone(), *s, *e)),
        };
    }
    t
}

/// shouldCreateSingleSessionWhenWithinGap, shouldMergeSessions,
/// shouldUpdateSessionIfTheSameTime, shouldRemoveMergedSessionsFromStateStore.
#[test]
fn kafka_sessions_merge_within_the_gap() {
    let mut p = processor(EmitStrategy::OnWindowUpdate);
    let got = run(&mut p, &[("john", 0), ("john", 500)]);
    assert_eq!(
        table(&got).into_iter().collect::<Vec<_>>(),
        vec![(("john".into(), 0, 500), 2)]
    );

    let mut p = processor(EmitStrategy::OnWindowUpdate);
    let mut got = run(&mut p, &[("mel", 0), ("mel", GAP + 1)]);
    assert_eq!(table(&got).len(), 2, "not within the gap");
    got.extend(run(&mut p, &[("mel", GAP / 2)]));
    assert_eq!(
        table(&got).into_iter().collect::<Vec<_>>(),
        vec![(("mel".into(), 0, GAP + 1), 3)]
    );

    let mut p = processor(EmitStrategy::OnWindowUpdate);
    let got = run(&mut p, &[("mel", 0), ("mel", 0)]);
    assert_eq!(
        got,
        out(&[("mel", 0, 0, Some(1), 0), ("mel", 0, 0, Some(2), 0)]),
        "the same point session is updated, not merged"
    );

    let mut p = processor(EmitStrategy::OnWindowUpdate);
    let got = run(&mut p, &[("a", 0), ("a", 100)]);
    assert_eq!(
        table(&got).into_iter().collect::<Vec<_>>(),
        vec![(("a".into(), 0, 100), 2)]
    );
    let changes = p.drain_changes();
    let mut store = InMemorySessionStore::in_memory(3 * GAP).unwrap();
    assert_eq!(p.write_changes(&changes, &mut store).unwrap(), 0);
    let sessions = store.find_sessions(b"a", 0, 100).unwrap();
    assert_eq!(sessions.len(), 1);
    assert_eq!((sessions[0].start, sessions[0].end), (0, 100));
    assert_eq!(sessions[0].value, 2i64.to_be_bytes());
}

/// shouldHaveMultipleSessionsForSameIdWhenTimestampApartBySessionGap:
/// Kafka's cached update results are the last update of each session; the
/// final results are the two closed sessions.
#[test]
fn kafka_sessions_apart_by_the_gap() {
    let t1 = GAP + 1;
    let t2 = 2 * (GAP + 1);
    let input = [
        ("mel", 0),
        ("mel", t1),
        ("mel", t1),
        ("mel", t2),
        ("mel", t2),
        ("mel", t2),
    ];
    let mut p = processor(EmitStrategy::OnWindowUpdate);
    let got = run(&mut p, &input);
    assert_eq!(
        got,
        out(&[
            ("mel", 0, 0, Some(1), 0),
            ("mel", t1, t1, Some(1), t1),
            ("mel", t1, t1, Some(2), t1),
            ("mel", t2, t2, Some(1), t2),
            ("mel", t2, t2, Some(2), t2),
            ("mel", t2, t2, Some(3), t2),
        ])
    );
    let mut p = processor(EmitStrategy::OnWindowClose);
    let batch = OwnedBatch::new(&strs(&input));
    let res = p.process(&batch.counts(), 0);
    let got: Out = rows_final(&res)
        .into_iter()
        .map(|(_, k, s, e, v, t)| (k, s, e, v, t))
        .collect();
    assert_eq!(
        got,
        out(&[("mel", 0, 0, Some(1), 0), ("mel", t1, t1, Some(2), t1)])
    );
}

/// shouldHandleMultipleSessionsAndMerging: final results by end, start,
/// then key; updates (uncached) with the tombstone of the merged session.
#[test]
fn kafka_multiple_sessions_and_merging() {
    let half = GAP / 2;
    let input = [
        ("a", 0),
        ("b", 0),
        ("c", 0),
        ("d", 0),
        ("d", half),
        ("a", GAP + 1),
        ("b", GAP + 1),
        ("a", GAP + 1 + half),
        ("c", GAP + 1 + half),
    ];
    let mut p = processor(EmitStrategy::OnWindowUpdate);
    let got = run(&mut p, &input);
    assert_eq!(
        got,
        out(&[
            ("a", 0, 0, Some(1), 0),
            ("b", 0, 0, Some(1), 0),
            ("c", 0, 0, Some(1), 0),
            ("d", 0, 0, Some(1), 0),
            ("d", 0, 0, None, 0),
            ("d", 0, half, Some(2), half),
            ("a", GAP + 1, GAP + 1, Some(1), GAP + 1),
            ("b", GAP + 1, GAP + 1, Some(1), GAP + 1),
            ("a", GAP + 1, GAP + 1, None, GAP + 1),
            ("a", GAP + 1, GAP + 1 + half, Some(2), GAP + 1 + half),
            ("c", GAP + 1 + half, GAP + 1 + half, Some(1), GAP + 1 + half),
        ])
    );
    // Kafka's cached results: the last update of each session.
    let last: BTreeMap<(String, i64, i64), i64> = table(&got);
    let want: BTreeMap<(String, i64, i64), i64> = [
        ("a", 0, 0, 1),
        ("b", 0, 0, 1),
        ("c", 0, 0, 1),
        ("d", 0, half, 2),
        ("b", GAP + 1, GAP + 1, 1),
        ("a", GAP + 1, GAP + 1 + half, 2),
        ("c", GAP + 1 + half, GAP + 1 + half, 1),
    ]
    .iter()
    .map(|&(k, s, e, v)| ((k.to_string(), s, e), v))
    .collect();
    assert_eq!(last, want);

    let mut p = processor(EmitStrategy::OnWindowClose);
    let batch = OwnedBatch::new(&strs(&input));
    let res = p.process(&batch.counts(), 0);
    let got: Out = rows_final(&res)
        .into_iter()
        .map(|(_, k, s, e, v, t)| (k, s, e, v, t))
        .collect();
    assert_eq!(
        got,
        out(&[
            ("a", 0, 0, Some(1), 0),
            ("b", 0, 0, Some(1), 0),
            ("c", 0, 0, Some(1), 0),
            ("d", 0, half, Some(2), half),
        ])
    );
    assert_eq!(res.stats.emitted_final, 4);
}

/// shouldImmediatelyForwardNewSessionWhenNonCachedStore and
/// shouldImmediatelyForwardRemovedSessionsWhenMerging.
#[test]
fn kafka_uncached_forwarding() {
    let mut p = processor(EmitStrategy::OnWindowUpdate);
    assert_eq!(
        run(&mut p, &[("a", 0), ("b", 0), ("c", 0)]),
        out(&[
            ("a", 0, 0, Some(1), 0),
            ("b", 0, 0, Some(1), 0),
            ("c", 0, 0, Some(1), 0),
        ])
    );
    let mut p = processor(EmitStrategy::OnWindowUpdate);
    let batch = OwnedBatch::new(&strs(&[("a", 0), ("a", 5)]));
    let res = p.process(&batch.counts(), 0);
    assert_eq!(res.tombstones, vec![false, true, false]);
    assert_eq!(
        rows(&res, &batch),
        vec![
            (0, "a".into(), 0, 0, Some(1), 0),
            (1, "a".into(), 0, 0, None, 0),
            (1, "a".into(), 0, 5, Some(2), 5),
        ]
    );
}

/// shouldLogAndMeterWhenSkippingLateRecordWithZeroGrace and
/// shouldLogAndMeterWhenSkippingLateRecordWithNonzeroGrace
/// (gap 10; the test's store keeps 3 * 5 minutes).
#[test]
fn kafka_late_records_with_zero_and_nonzero_grace() {
    for (grace, input) in [
        (
            0,
            vec![("dummy", 0), ("OnTime1", 0), ("dummy", 11), ("Late1", 0)],
        ),
        (
            1,
            vec![
                ("dummy", 0),
                ("OnTime1", 0),
                ("dummy", 11),
                ("OnTime2", 0),
                ("dummy", 12),
                ("Late1", 0),
            ],
        ),
    ] {
        let windows = SessionWindows::of_inactivity_gap_and_grace(10, grace).unwrap();
        let mut p = SessionWindowedAggregation::new(Count, windows, EmitStrategy::OnWindowUpdate)
            .with_retention(3 * GAP)
            .unwrap();
        let got = run(&mut p, &input);
        assert_eq!(p.totals().dropped_expired, 1, "grace {grace}");
        assert_eq!(p.totals().dropped_records(), 1);
        assert!(got.iter().all(|r| r.0 != "Late1"));
        let updates = got.iter().filter(|r| r.3.is_some()).count();
        assert_eq!(updates, input.len() - 1);
    }
    let mut p = processor(EmitStrategy::OnWindowUpdate);
    let input = vec![
        Rec {
            key: None,
            ts: 0,
            value: Some(1i64),
        },
        Rec {
            key: Some(b"a".to_vec()),
            ts: 0,
            value: None,
        },
    ];
    let batch = OwnedBatch::new(&input);
    let res = p.process(&batch.counts(), 0);
    // Kafka's count sees the null value; only the null key is dropped.
    assert_eq!(res.len(), 1);
    assert_eq!(res.stats.dropped_null_key, 1);
}

// ---------------------------------------------------------------------------
// Semantic model and invariance under batching and restarts.

/// Each key's records as runs no more than `gap` apart: (start, end) ->
/// (count, sum).
fn semantic_sessions(gap: i64, input: &[Rec<i64>]) -> BTreeMap<(String, i64, i64), (i64, i64)> {
    let mut by_key: BTreeMap<String, Vec<(i64, i64)>> = BTreeMap::new();
    for r in input {
        let key = String::from_utf8(r.key.clone().unwrap()).unwrap();
        by_key
            .entry(key)
            .or_default()
            .push((r.ts, r.value.unwrap()));
    }
    let mut out = BTreeMap::new();
    for (key, mut recs) in by_key {
        recs.sort_unstable();
        let mut i = 0;
        while i < recs.len() {
            let mut j = i;
            while j + 1 < recs.len() && recs[j + 1].0 - recs[j].0 <= gap {
                j += 1;
            }
            let sum = recs[i..=j].iter().map(|r| r.1).sum();
            out.insert(
                (key.clone(), recs[i].0, recs[j].0),
                ((j - i + 1) as i64, sum),
            );
            i = j + 1;
        }
    }
    out
}

fn random_input(rng: &mut Rng, n: usize, span: i64) -> Vec<Rec<i64>> {
    (0..n)
        .map(|_| {
            let key = format!("k{}", rng.range(0, 3));
            rec(&key, rng.range(-9, 9), rng.range(0, span))
        })
        .collect()
}

/// Processes `input` in random batches (restarting from the store after
/// each when `restart`); returns all results as (row, key, start, end,
/// value, ts).
fn run_batched(
    make: &dyn Fn() -> SessionWindowedAggregation<Sum<i64>>,
    input: &[Rec<i64>],
    rng: &mut Rng,
    restart: bool,
) -> Vec<(u32, String, i64, i64, Option<i64>, i64)> {
    let mut p = make();
    let mut store = InMemorySessionStore::in_memory(p.retention() + 1).unwrap();
    let mut all = Vec::new();
    let mut i = 0;
    while i < input.len() {
        let n = (rng.range(1, 40) as usize).min(input.len() - i);
        let batch = OwnedBatch::new(&input[i..i + n]);
        let res: WindowedResults<i64> = p.process(&batch.values(), 0);
        let owned = matches!(res.keys, strom_core::window::ResultKeys::Owned(_));
        let listed = if owned {
            rows_final(&res)
        } else {
            rows(&res, &batch)
        };
        for (row, key, start, end, value, ts) in listed {
            all.push((row + i as u32, key, start, end, value, ts));
        }
        let changes = p.drain_changes();
        p.write_changes(&changes, &mut store).unwrap();
        if restart {
            let mut q = make();
            q.restore_times(
                p.observed_stream_time(),
                p.last_emit_close_time(),
                p.store_observed_time(),
            );
            q.restore_from_store(&store).unwrap();
            p = q;
        }
        i += n;
    }
    all
}

#[test]
fn random_inputs_make_the_semantic_sessions() {
    let mut rng = Rng(7);
    for case in 0..300 {
        let gap = rng.range(1, 10);
        let n = rng.range(1, 60) as usize;
        let span = rng.range(1, 8) * gap;
        let input = random_input(&mut rng, n, span);
        let windows = SessionWindows::of_inactivity_gap_and_grace(gap, 1_000).unwrap();
        let make = || {
            SessionWindowedAggregation::new(
                Sum::<i64>::new(),
                windows,
                EmitStrategy::OnWindowUpdate,
            )
        };
        let results = run_batched(&make, &input, &mut rng, false);
        let mut t = BTreeMap::new();
        for (_, k, s, e, v, ts) in results {
            assert_eq!(ts, e, "results carry their session's end");
            match v {
                Some(v) => t.insert((k, s, e), v),
                None => t.remove(&(k, s, e)),
            };
        }
        let want: BTreeMap<_, _> = semantic_sessions(gap, &input)
            .into_iter()
            .map(|(k, (_, sum))| (k, sum))
            .collect();
        assert_eq!(t, want, "case {case}: gap {gap}");
    }
}

/// Final results: each session once, when closed (records in order).
#[test]
fn random_final_results_are_the_semantic_sessions() {
    let mut rng = Rng(77);
    for case in 0..300 {
        let gap = rng.range(1, 10);
        let n = rng.range(1, 60) as usize;
        let span = rng.range(1, 8) * gap;
        let mut input = random_input(&mut rng, n, span);
        input.sort_by_key(|r| r.ts);
        let flush = input.last().map_or(0, |r| r.ts) + 3 * gap + 3;
        input.push(rec("flush", 0, flush));
        let windows = SessionWindows::of_inactivity_gap_with_no_grace(gap).unwrap();
        // A retention above gap + grace: see `default_retention_hides_a_session_one_gap_back`.
        let make = || {
            SessionWindowedAggregation::new(Sum::<i64>::new(), windows, EmitStrategy::OnWindowClose)
                .with_retention(1_000)
                .unwrap()
                .with_emit_interval(0)
                .unwrap()
        };
        let results = run_batched(&make, &input, &mut rng, false);
        let mut got = BTreeMap::new();
        for (_, k, s, e, v, _) in results {
            assert!(
                got.insert((k, s, e), v.unwrap()).is_none(),
                "case {case}: twice"
            );
        }
        let want: BTreeMap<_, _> = semantic_sessions(gap, &input[..input.len() - 1])
            .into_iter()
            .map(|(k, (_, sum))| (k, sum))
            .collect();
        assert_eq!(got, want, "case {case}: gap {gap}");
    }
}

/// Late records, drops, retention and segments: random batches and
/// restarts from the store give the results of one uninterrupted batch.
#[test]
fn batches_and_restarts_do_not_change_results() {
    let mut rng = Rng(777);
    let mut totals = (0, 0, 0);
    for case in 0..300 {
        let gap = rng.range(1, 10);
        let grace = rng.range(0, 10);
        let windows = SessionWindows::of_inactivity_gap_and_grace(gap, grace).unwrap();
        let emit = if rng.chance(50) {
            EmitStrategy::OnWindowUpdate
        } else {
            EmitStrategy::OnWindowClose
        };
        let mut input = random_input(&mut rng, 80, 8 * gap);
        for r in &mut input {
            if rng.chance(5) {
                r.ts += rng.range(20, 70_000);
            }
        }
        let mut keyed: Vec<(i64, Rec<i64>)> = input
            .into_iter()
            .map(|r| (r.ts + rng.range(0, 2 * gap + grace), r))
            .collect();
        keyed.sort_by_key(|(k, _)| *k);
        let input: Vec<Rec<i64>> = keyed.into_iter().map(|(_, r)| r).collect();
        let make = || {
            SessionWindowedAggregation::new(Sum::<i64>::new(), windows, emit)
                .with_emit_interval(0)
                .unwrap()
        };
        let whole = {
            let mut p = make();
            let batch = OwnedBatch::new(&input);
            let res = p.process(&batch.values(), 0);
            totals.0 += res.stats.dropped_expired;
            totals.1 += res.stats.emitted_final;
            totals.2 += res.len() as u64;
            if emit == EmitStrategy::OnWindowClose {
                rows_final(&res)
            } else {
                rows(&res, &batch)
            }
        };
        let batched = run_batched(&make, &input, &mut rng, false);
        assert_eq!(batched, whole, "case {case}: batches");
        let restarted = run_batched(&make, &input, &mut rng, true);
        assert_eq!(restarted, whole, "case {case}: restarts");
    }
    assert!(totals.0 > 200 && totals.1 > 500, "{totals:?}");
}

/// With the default retention (gap + grace) Kafka's store hides a session
/// that ended exactly one gap before the store's time, so a record one gap
/// after it, once another key brought the store there, starts a new session
/// instead of extending it.
#[test]
fn default_retention_hides_a_session_one_gap_back() {
    let windows = SessionWindows::of_inactivity_gap_with_no_grace(10).unwrap();
    for (retention, want) in [(10, vec![(0, 0), (10, 10)]), (11, vec![(0, 10)])] {
        let mut p = SessionWindowedAggregation::new(Count, windows, EmitStrategy::OnWindowUpdate)
            .with_retention(retention)
            .unwrap();
        let batch = OwnedBatch::new(&[rec("k", 0, 0), rec("other", 0, 10), rec("k", 0, 10)]);
        let res = p.process(&batch.counts(), 0);
        let sessions: Vec<(i64, i64)> = table(
            &rows(&res, &batch)
                .into_iter()
                .map(|(_, k, s, e, v, t)| (k, s, e, v, t))
                .collect(),
        )
        .into_keys()
        .filter(|(k, _, _)| k == "k")
        .map(|(_, s, e)| (s, e))
        .collect();
        assert_eq!(sessions, want, "retention {retention}");
    }
}

/// Merging combines the sessions' states in the store's order (end, then
/// start) before the record is added: a mean over merged sessions.
#[test]
fn merged_mean_counts_every_record() {
    let windows = SessionWindows::of_inactivity_gap_and_grace(10, 100).unwrap();
    let mut p =
        SessionWindowedAggregation::new(Mean::<i64>::new(), windows, EmitStrategy::OnWindowUpdate);
    let input = vec![rec("k", 1, 0), rec("k", 2, 20), rec("k", 6, 10)];
    let batch = OwnedBatch::new(&input);
    let res = p.process(&batch.values(), 0);
    let last = rows(&res, &batch).pop().unwrap();
    assert_eq!((last.2, last.3, last.4), (0, 20, Some(3.0)));
    assert_eq!(res.tombstones.iter().filter(|&&t| t).count(), 2);
}

/// Kafka's `CachingSessionStore.findSessions` merges what its cache holds
/// with what the store still shows, so behind a cache a session the store has
/// expired is still merged (tests/differential FINDINGS.md, C10: gap 5, no
/// grace, retention 5; a@88, c@98, a@93). Without a cache it is not.
#[test]
fn behind_a_record_cache_an_expired_session_the_cache_holds_is_merged() {
    use std::collections::HashSet;
    use std::sync::{Arc, Mutex};

    // The sessions the cache holds: (key, start, end).
    type Held = HashSet<(Vec<u8>, i64, i64)>;
    let windows = SessionWindows::of_inactivity_gap_and_grace(5, 0).unwrap();
    let cached: Arc<Mutex<Held>> = Arc::default();
    let held = Arc::clone(&cached);
    let mut with_cache =
        SessionWindowedAggregation::new(Count, windows, EmitStrategy::OnWindowUpdate)
            .with_record_cache(Box::new(move |key, start, end| {
                held.lock().unwrap().contains(&(key.to_vec(), start, end))
            }));
    let mut without = SessionWindowedAggregation::new(Count, windows, EmitStrategy::OnWindowUpdate);
    let mut got = (Vec::new(), Vec::new());
    for record in [("a", 88), ("c", 98), ("a", 93)] {
        got.0.extend(run(&mut with_cache, &[record]));
        got.1.extend(run(&mut without, &[record]));
        // What the batch wrote is in the cache now (a flush keeps it there).
        let changes = with_cache.drain_changes();
        let mut cache = cached.lock().unwrap();
        for i in 0..changes.len() {
            let session = (
                changes.keys.get(i).to_vec(),
                changes.starts[i],
                changes.ends[i],
            );
            if changes.states[i].is_some() {
                cache.insert(session);
            } else {
                cache.remove(&session);
            }
        }
    }
    let first = [("a", 88, 88, Some(1), 88), ("c", 98, 98, Some(1), 98)];
    let mut merged = first.to_vec();
    merged.extend([("a", 88, 88, None, 88), ("a", 88, 93, Some(2), 93)]);
    assert_eq!(got.0, out(&merged));
    let mut apart = first.to_vec();
    apart.push(("a", 93, 93, Some(1), 93));
    assert_eq!(got.1, out(&apart));

    // a@90 would merge into [88, 93] while the cache holds it; once the
    // cache has evicted it, the session is gone and a@90 is too late.
    cached.lock().unwrap().clear();
    assert_eq!(run(&mut with_cache, &[("a", 90)]), out(&[]));
}
