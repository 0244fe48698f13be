//! Shared helpers for the window kernel tests: owned columnar batches and
//! result rows in a comparable form.
#![allow(dead_code, reason = "each test file uses a different part")]

use strom_core::window::{
    Batch, BinaryBuffer, BinaryColumn, KafkaValue, NoValues, Validity, Values, WindowedResults,
};

/// One input record: key (None = null), timestamp, value (None = null).
#[derive(Debug, Clone)]
pub struct Rec<V> {
    pub key: Option<Vec<u8>>,
    pub ts: i64,
    pub value: Option<V>,
}

pub fn rec<V>(key: &str, value: V, ts: i64) -> Rec<V> {
    Rec {
        key: Some(key.as_bytes().to_vec()),
        ts,
        value: Some(value),
    }
}

/// Owned Arrow-layout columns for a slice of records.
pub struct OwnedBatch<V> {
    keys: BinaryBuffer,
    key_bits: Vec<u8>,
    ts: Vec<i64>,
    values: Vec<V>,
    value_bits: Vec<u8>,
}

fn bits(valid: impl Iterator<Item = bool>) -> Vec<u8> {
    let mut out = Vec::new();
    for (i, v) in valid.enumerate() {
        if i % 8 == 0 {
            out.push(0);
        }
        if v {
            *out.last_mut().unwrap() |= 1 << (i % 8);
        }
    }
    out
}

impl<V: Copy + Default> OwnedBatch<V> {
    pub fn new(records: &[Rec<V>]) -> Self {
        Self {
            keys: BinaryBuffer::from_rows(
                records.iter().map(|r| r.key.clone().unwrap_or_default()),
            ),
            key_bits: bits(records.iter().map(|r| r.key.is_some())),
            ts: records.iter().map(|r| r.ts).collect(),
            values: records
                .iter()
                .map(|r| r.value.unwrap_or_default())
                .collect(),
            value_bits: bits(records.iter().map(|r| r.value.is_some())),
        }
    }

    pub fn key_column(&self) -> BinaryColumn<'_> {
        let validity = Validity::new(&self.key_bits, 0, self.ts.len()).unwrap();
        BinaryColumn::new(&self.keys.data, &self.keys.offsets, Some(validity)).unwrap()
    }

    fn validity(&self) -> Validity<'_> {
        Validity::new(&self.value_bits, 0, self.ts.len()).unwrap()
    }

    /// The batch for a count (only the values' nulls matter).
    pub fn counts(&self) -> Batch<'_, NoValues<'_>> {
        let values = NoValues::with_validity(self.ts.len(), self.validity());
        Batch::new(self.key_column(), &self.ts, values).unwrap()
    }

    pub fn values(&self) -> Batch<'_, Values<'_, V>> {
        let values = Values::with_validity(&self.values, self.validity());
        Batch::new(self.key_column(), &self.ts, values).unwrap()
    }
}

/// One result: (row, key, start, end, value or None for a tombstone, ts).
pub type Row<O> = (u32, String, i64, i64, Option<O>, i64);

/// The results of processing `input` (whose keys give the updates' keys).
pub fn rows<O: KafkaValue, V: Copy + Default>(
    r: &WindowedResults<O>,
    input: &OwnedBatch<V>,
) -> Vec<Row<O>> {
    let keys = input.key_column();
    (0..r.len())
        .map(|i| {
            (
                r.rows[i],
                String::from_utf8_lossy(r.key(i, &keys).unwrap()).into_owned(),
                r.starts[i],
                r.ends[i],
                r.value(i),
                r.timestamps[i],
            )
        })
        .collect()
}

/// Results without the row: (key, start, end, value, ts).
pub fn kvts<O: KafkaValue, V: Copy + Default>(
    r: &WindowedResults<O>,
    input: &OwnedBatch<V>,
) -> Vec<(String, i64, i64, Option<O>, i64)> {
    rows(r, input)
        .into_iter()
        .map(|(_, k, s, e, v, t)| (k, s, e, v, t))
        .collect()
}

/// Final results (whose keys are owned).
pub fn rows_final<O: KafkaValue>(r: &WindowedResults<O>) -> Vec<Row<O>> {
    assert!(
        matches!(r.keys, strom_core::window::ResultKeys::Owned(_)),
        "final results own their keys"
    );
    rows(r, &OwnedBatch::<()>::new(&[]))
}

pub fn kvts_final<O: KafkaValue>(
    r: &WindowedResults<O>,
) -> Vec<(String, i64, i64, Option<O>, i64)> {
    rows_final(r)
        .into_iter()
        .map(|(_, k, s, e, v, t)| (k, s, e, v, t))
        .collect()
}

/// Kafka's test aggregates are strings like "0+1+2" (initializer "0", one
/// "+v" per record): the count is the number of records.
pub fn kafka_count(agg: &str) -> i64 {
    agg.split('+').skip(1).count() as i64
}

/// ... and the sum the sum of the values.
pub fn kafka_sum(agg: &str) -> i64 {
    agg.split('+')
        .skip(1)
        .map(|v| v.parse::<i64>().unwrap())
        .sum()
}

/// A small deterministic PRNG (splitmix64) for the seeded random tests.
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `lo..=hi`.
    pub fn range(&mut self, lo: i64, hi: i64) -> i64 {
        lo + (self.next() % ((hi - lo + 1) as u64)) as i64
    }

    pub fn chance(&mut self, percent: u64) -> bool {
        self.next() % 100 < percent
    }
}
