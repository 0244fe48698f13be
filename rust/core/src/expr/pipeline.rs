//! A sub-topology's expression steps fused: a batch of raw JSON values goes
//! through every step (filters, `map_values` of a `struct`) in one call,
//! with no Python object per record.
//!
//! The fused run is all or nothing: a value that is not JSON, or a step that
//! fails on a row, gives no result, and the caller runs that batch through
//! the ordinary nodes, which route exactly those records to their handlers.
//! A clean batch's result is what the ordinary nodes would forward.

use super::json::FieldTree;
use super::{Evaluated, JsonRows, Plan};
use crate::log::ReadBatch;

/// One expression step.
#[derive(Debug, Clone)]
pub enum Step {
    /// `filter` (keeps the rows whose predicate is true) or, negated,
    /// `filter_not` (keeps the others).
    Filter { plan: Plan, negate: bool },
    /// `map_values` of a `struct`: each value becomes the struct's JSON.
    MapStruct(Plan),
}

/// The rows that came through every step, and their values.
#[derive(Debug)]
pub struct Passed {
    /// The input row of each output record, in input order.
    pub rows: Vec<usize>,
    /// The output values when a step mapped them (one span per output row);
    /// None: the input values of `rows`, as they are.
    pub mapped: Option<JsonRows>,
}

impl Passed {
    /// Every output record's value, given the input values.
    fn values<'a>(&'a self, values: &[Option<&'a [u8]>]) -> Vec<Option<&'a [u8]>> {
        (0..self.rows.len())
            .map(|i| self.value(i, values))
            .collect()
    }

    /// Output record `i`'s value, given the input values.
    pub fn value<'a>(&'a self, i: usize, values: &[Option<&'a [u8]>]) -> Option<&'a [u8]> {
        match &self.mapped {
            None => values[self.rows[i]],
            Some(m) => m.spans[i].map(|(a, b)| &m.text.as_bytes()[a..b]),
        }
    }
}

/// A batch read from the log, through a pipeline.
#[derive(Debug)]
pub struct FusedBatch<'b> {
    batch: &'b ReadBatch,
    values: Vec<Option<&'b [u8]>>,
    /// Each chunk's first row and what came through it.
    parts: Vec<(usize, Passed)>,
    pub max_timestamp: i64,
    /// The offset after the batch's last record.
    pub end_offset: u64,
}

impl FusedBatch<'_> {
    /// Each output record's key, value and timestamp, in order.
    pub fn records(&self) -> impl Iterator<Item = (Option<&[u8]>, Option<&[u8]>, i64)> + '_ {
        self.parts.iter().flat_map(move |(base, passed)| {
            let values = &self.values[*base..];
            passed.rows.iter().enumerate().map(move |(i, &row)| {
                let value = passed.value(i, values);
                let row = base + row;
                (self.batch.key(row), value, self.batch.timestamps[row])
            })
        })
    }
}

/// Expression steps from a `Json` source to a sink, compiled once.
#[derive(Debug, Clone)]
pub struct Pipeline {
    steps: Vec<Step>,
    /// Whether keys must be UTF-8 (a `String` key serde reads them).
    utf8_keys: bool,
}

impl Pipeline {
    pub fn new(steps: Vec<Step>, utf8_keys: bool) -> Self {
        Pipeline { steps, utf8_keys }
    }

    /// Runs over a batch read from the log; None when the batch must take
    /// the ordinary path: it is empty, has a negative timestamp (dropped
    /// there), a key that is not UTF-8 (when checked), a value that is not
    /// JSON or a step failing on a record (which the ordinary path hands
    /// to the handlers).
    pub fn run_batch<'b>(&self, batch: &'b ReadBatch) -> Option<FusedBatch<'b>> {
        let (max_timestamp, end_offset) = self.check_batch(batch)?;
        let values: Vec<Option<&[u8]>> = (0..batch.len()).map(|i| batch.value(i)).collect();
        let parts = self.run_parts(&values)?;
        Some(FusedBatch {
            batch,
            values,
            parts,
            max_timestamp,
            end_offset,
        })
    }

    /// [`Pipeline::run_batch`] with each output record pushed to `sink` as
    /// it comes, a mapped value written straight into the sink's buffer.
    /// Returns the batch's largest timestamp and the offset after its last
    /// record; None when the batch must take the ordinary path, having
    /// perhaps pushed some of its records first: the caller drops them
    /// ([`crate::log::RecordBatchBuilder::rewind`]).
    pub fn run_batch_into(
        &self,
        batch: &ReadBatch,
        sink: &mut impl FrameSink,
    ) -> Option<(i64, u64)> {
        let checked = self.check_batch(batch)?;
        let values: Vec<Option<&[u8]>> = (0..batch.len()).map(|i| batch.value(i)).collect();
        for (base, chunk) in (0..).step_by(CHUNK_ROWS).zip(values.chunks(CHUNK_ROWS)) {
            let key = |row: usize| batch.key(base + row);
            let timestamp = |row: usize| batch.timestamps[base + row];
            if let Some((Step::MapStruct(plan), before)) = self.steps.split_last() {
                // The last step's values are written where they are framed.
                let passed = run_steps(before, chunk)?;
                if passed.rows.is_empty() {
                    continue;
                }
                let current = passed.values(chunk);
                let evaluated = clean(plan.eval_json(&current))?;
                let writer = evaluated.writer();
                sink.reserve(
                    passed.rows.len(),
                    current.iter().flatten().map(|v| v.len()).sum(),
                );
                for (i, &row) in passed.rows.iter().enumerate() {
                    sink.push(timestamp(row), key(row), |buf| writer.write(i, buf));
                }
            } else {
                let passed = self.run_chunk(chunk)?;
                for (i, &row) in passed.rows.iter().enumerate() {
                    let value = passed.value(i, chunk);
                    sink.push(timestamp(row), key(row), |buf| {
                        value.inspect(|v| buf.extend_from_slice(v)).is_some()
                    });
                }
            }
        }
        Some(checked)
    }

    /// The batch's largest timestamp and the offset after its last record,
    /// if it can run fused (see [`Pipeline::run_batch`]).
    fn check_batch(&self, batch: &ReadBatch) -> Option<(i64, u64)> {
        let stamps = &batch.timestamps;
        if stamps.iter().any(|&t| t < 0) {
            return None;
        }
        let max_timestamp = stamps.iter().copied().max()?;
        let end_offset = batch.offsets.last()? + 1;
        let utf8 = |i: usize| {
            batch
                .key(i)
                .is_none_or(|k| k.is_ascii() || std::str::from_utf8(k).is_ok())
        };
        if self.utf8_keys && !(0..batch.len()).all(utf8) {
            return None;
        }
        Some((max_timestamp, end_offset))
    }

    /// Runs every step over `values` (None: a null value); None when a value
    /// is not JSON or a step fails on a row.
    pub fn run(&self, values: &[Option<&[u8]>]) -> Option<Passed> {
        if values.len() <= CHUNK_ROWS {
            return self.run_chunk(values);
        }
        let parts = self.run_parts(values)?;
        let mut passed = Passed {
            rows: Vec::with_capacity(values.len()),
            mapped: None,
        };
        for (base, part) in parts {
            if let Some(m) = part.mapped {
                let out = passed.mapped.get_or_insert_with(JsonRows::default);
                let at = out.text.len();
                out.text.push_str(&m.text);
                out.spans
                    .extend(m.spans.iter().map(|s| s.map(|(a, b)| (a + at, b + at))));
            }
            passed.rows.extend(part.rows.iter().map(|r| r + base));
        }
        Some(passed)
    }

    /// [`Pipeline::run`] a chunk of rows at a time, each chunk's result
    /// apart (with its first row): its columns stay in the CPU's cache from
    /// one step to the next, and are small enough for the allocator to reuse
    /// (a whole batch's are mapped and page-faulted in afresh each time);
    /// its output is not copied into one buffer.
    fn run_parts(&self, values: &[Option<&[u8]>]) -> Option<Vec<(usize, Passed)>> {
        (0..)
            .step_by(CHUNK_ROWS)
            .zip(values.chunks(CHUNK_ROWS))
            .map(|(base, chunk)| Some((base, self.run_chunk(chunk)?)))
            .collect()
    }

    fn run_chunk(&self, values: &[Option<&[u8]>]) -> Option<Passed> {
        if self.steps.is_empty() {
            // Nothing reads the values: they are still checked, as the
            // source's serde would.
            return FieldTree::validate(values).is_empty().then(|| Passed {
                rows: (0..values.len()).collect(),
                mapped: None,
            });
        }
        run_steps(&self.steps, values)
    }
}

/// Runs `steps` over a chunk's values (without steps: every row, unread).
fn run_steps(steps: &[Step], values: &[Option<&[u8]>]) -> Option<Passed> {
    let mut passed = Passed {
        rows: (0..values.len()).collect(),
        mapped: None,
    };
    for step in steps {
        if passed.rows.is_empty() {
            break;
        }
        let (kept, mapped) = {
            let current = passed.values(values);
            match step {
                Step::Filter { plan, negate } => {
                    let evaluated = clean(plan.eval_json(&current))?;
                    let true_rows = evaluated.true_rows();
                    let kept = if *negate {
                        complement(&true_rows, current.len())
                    } else {
                        true_rows
                    };
                    (Some(kept), None)
                }
                Step::MapStruct(plan) => {
                    let evaluated = clean(plan.eval_json(&current))?;
                    (None, Some(evaluated.to_json()))
                }
            }
        };
        if let Some(kept) = kept {
            passed.rows = kept.iter().map(|&i| passed.rows[i]).collect();
            if let Some(m) = &mut passed.mapped {
                m.spans = kept.iter().map(|&i| m.spans[i]).collect();
            }
        }
        if mapped.is_some() {
            passed.mapped = mapped;
        }
    }
    Some(passed)
}

/// Where [`Pipeline::run_batch_into`] puts its output records.
pub trait FrameSink {
    /// Room for about `records` more records with `bytes` of keys and values.
    fn reserve(&mut self, records: usize, bytes: usize);
    /// One output record, whose value `value` writes into the buffer it is
    /// framed in (false: a null value, nothing written).
    fn push(
        &mut self,
        timestamp: i64,
        key: Option<&[u8]>,
        value: impl FnOnce(&mut Vec<u8>) -> bool,
    );
}

/// Rows run through the steps together (`Pipeline::run`).
const CHUNK_ROWS: usize = 1024;

/// The evaluation if no row failed.
fn clean(evaluated: Evaluated<'_>) -> Option<Evaluated<'_>> {
    evaluated.errors.is_empty().then_some(evaluated)
}

/// The rows of `0..n` not in `sorted`.
fn complement(sorted: &[usize], n: usize) -> Vec<usize> {
    let mut out = Vec::with_capacity(n - sorted.len());
    let mut next = sorted.iter().peekable();
    for i in 0..n {
        if next.next_if_eq(&&i).is_none() {
            out.push(i);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::expr::{BinaryOp, Expr, Value};
    use crate::log::{RecordBatchBuilder, Span};

    fn bin(op: BinaryOp, a: Expr, b: Expr) -> Expr {
        Expr::Binary(op, Box::new(a), Box::new(b))
    }

    fn col(name: &str) -> Expr {
        Expr::Col(vec![name.to_owned()])
    }

    fn lit(i: i64) -> Expr {
        Expr::Lit(Value::Int(i))
    }

    fn filter(negate: bool) -> Step {
        // a % 2 == 0
        let even = bin(BinaryOp::Eq, bin(BinaryOp::Mod, col("a"), lit(2)), lit(0));
        Step::Filter {
            plan: Plan::compile(&even),
            negate,
        }
    }

    fn map() -> Step {
        let doubled = Expr::Struct(vec![("a".to_owned(), bin(BinaryOp::Mul, col("a"), lit(2)))]);
        Step::MapStruct(Plan::compile(&doubled))
    }

    fn docs(texts: &[&'static str]) -> Vec<Option<&'static [u8]>> {
        texts.iter().map(|t| Some(t.as_bytes())).collect()
    }

    fn outputs(p: &Passed, values: &[Option<&[u8]>]) -> Vec<String> {
        (0..p.rows.len())
            .map(|i| String::from_utf8(p.value(i, values).unwrap().to_vec()).unwrap())
            .collect()
    }

    #[test]
    fn filters_then_maps() {
        let values = docs(&[r#"{"a":1}"#, r#"{"a":2}"#, r#"{"a":4,"x":[1]}"#]);
        let p = Pipeline::new(vec![filter(false), map()], false)
            .run(&values)
            .unwrap();
        assert_eq!(p.rows, vec![1, 2]);
        assert_eq!(outputs(&p, &values), vec![r#"{"a":4}"#, r#"{"a":8}"#]);
    }

    #[test]
    fn maps_then_filters_the_mapped_values() {
        let values = docs(&[r#"{"a":1}"#, r#"{"a":3}"#]);
        let negated = Pipeline::new(vec![map(), filter(true)], false).run(&values);
        // 2a is even for every row: filter_not keeps none.
        assert_eq!(negated.unwrap().rows, Vec::<usize>::new());
        let kept = Pipeline::new(vec![filter(true), map()], false)
            .run(&values)
            .unwrap();
        assert_eq!(kept.rows, vec![0, 1]);
        assert_eq!(outputs(&kept, &values), vec![r#"{"a":2}"#, r#"{"a":6}"#]);
    }

    /// A batch of several chunks, one of them filtered out whole: the rows
    /// and values are those of the batch run as one.
    #[test]
    fn chunks_add_up_to_the_batch() {
        let n = 3 * CHUNK_ROWS;
        let texts: Vec<String> = (0..n).map(|i| format!(r#"{{"a":{i}}}"#)).collect();
        let values: Vec<Option<&[u8]>> = texts.iter().map(|t| Some(t.as_bytes())).collect();
        let (low, high) = (CHUNK_ROWS / 2, 2 * CHUNK_ROWS + 10);
        let outside = bin(
            BinaryOp::Or,
            bin(BinaryOp::Lt, col("a"), lit(low as i64)),
            bin(BinaryOp::Ge, col("a"), lit(high as i64)),
        );
        let keep = Step::Filter {
            plan: Plan::compile(&outside),
            negate: false,
        };
        let p = Pipeline::new(vec![keep.clone(), map()], false)
            .run(&values)
            .unwrap();
        let expected: Vec<usize> = (0..low).chain(high..n).collect();
        assert_eq!(p.rows, expected);
        let doubled: Vec<String> = expected
            .iter()
            .map(|i| format!(r#"{{"a":{}}}"#, 2 * i))
            .collect();
        assert_eq!(outputs(&p, &values), doubled);
        let filtered = Pipeline::new(vec![keep], false).run(&values).unwrap();
        assert_eq!(filtered.rows, expected);
        assert!(filtered.mapped.is_none());
        // A bad value in the last chunk fails the batch.
        let mut bad = values.clone();
        bad[n - 1] = Some(b"{");
        assert!(Pipeline::new(vec![map()], false).run(&bad).is_none());
    }

    /// A batch read from the log with these values; every third key null.
    fn read_batch(values: &[Option<String>]) -> ReadBatch {
        let mut b = ReadBatch::default();
        let mut put = |bytes: &[u8]| {
            let start = b.data.len();
            b.data.extend_from_slice(bytes);
            Some(Span {
                start,
                len: bytes.len(),
            })
        };
        let spans: Vec<_> = values
            .iter()
            .enumerate()
            .map(|(i, v)| {
                let key = (i % 3 != 0)
                    .then(|| put(format!("k{i}").as_bytes()))
                    .flatten();
                (key, v.as_ref().and_then(|v| put(v.as_bytes())))
            })
            .collect();
        for (i, (key, value)) in spans.into_iter().enumerate() {
            b.offsets.push(100 + i as u64);
            b.timestamps.push(i as i64 * 7);
            b.keys.push(key);
            b.values.push(value);
        }
        b
    }

    impl FrameSink for RecordBatchBuilder {
        fn reserve(&mut self, records: usize, bytes: usize) {
            RecordBatchBuilder::reserve(self, records, bytes);
        }
        fn push(
            &mut self,
            timestamp: i64,
            key: Option<&[u8]>,
            value: impl FnOnce(&mut Vec<u8>) -> bool,
        ) {
            self.push_with(timestamp, key, value);
        }
    }

    /// Output written straight into frames is, frame for frame, what
    /// `run_batch`'s records give pushed; a batch that fails in its last
    /// chunk has pushed its first chunks, which a rewind drops exactly.
    #[test]
    fn run_into_frames_what_run_batch_gives() {
        let n = 2 * CHUNK_ROWS + 100;
        let values: Vec<Option<String>> = (0..n)
            .map(|i| (i % 11 != 5).then(|| format!(r#"{{"a":{i},"s":"\u00e9{i}"}}"#)))
            .collect();
        let batch = read_batch(&values);
        let pipelines = [
            vec![map()],
            vec![filter(false), map()],
            vec![map(), filter(true)],
            vec![filter(true)],
            vec![],
        ];
        for steps in pipelines {
            let p = Pipeline::new(steps.clone(), true);
            let fused = p.run_batch(&batch).unwrap();
            let mut expected = RecordBatchBuilder::new();
            for (key, value, ts) in fused.records() {
                expected.push(ts, key, value, &[]);
            }
            let mut written = RecordBatchBuilder::new();
            let done = p.run_batch_into(&batch, &mut written);
            assert_eq!(done, Some((fused.max_timestamp, fused.end_offset)));
            assert_eq!(written.len(), expected.len(), "{steps:?}");
            assert!(written.buf == expected.buf, "{steps:?}");
        }
        // A row failing in the last chunk: the first two chunks were pushed.
        let mut bad = values.clone();
        bad[n - 1] = Some(r#"{"a":"x"}"#.to_owned());
        let batch = read_batch(&bad);
        let mut sink = RecordBatchBuilder::new();
        sink.push(1, Some(b"before"), Some(b"{}"), &[]);
        let before = sink.clone();
        let mark = sink.mark();
        let p = Pipeline::new(vec![map()], true);
        assert_eq!(p.run_batch_into(&batch, &mut sink), None);
        assert_eq!(sink.len(), 1 + 2 * CHUNK_ROWS);
        sink.rewind(mark);
        assert_eq!(sink.len(), 1);
        assert!(sink.buf == before.buf);
    }

    #[test]
    fn a_bad_value_or_a_failed_row_gives_no_result() {
        let steps = || Pipeline::new(vec![filter(false)], false);
        assert!(steps().run(&docs(&[r#"{"a":2}"#, "{"])).is_none());
        assert!(steps().run(&docs(&[r#"{"a":"x"}"#])).is_none());
        // A null value has null fields: dropped by the filter, not a failure.
        assert_eq!(steps().run(&[None]).unwrap().rows, Vec::<usize>::new());
        let copy = Pipeline::new(Vec::new(), false);
        assert!(copy.run(&docs(&["[1,"])).is_none());
        let all = copy.run(&docs(&[" 1 ", "{}"])).unwrap();
        assert_eq!(all.rows, vec![0, 1]);
        assert!(all.mapped.is_none());
    }
}
